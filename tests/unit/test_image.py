# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Golden images: node_seal (what a seal removes, empties and keeps; its refusals; check mode; the manifest) and
image_boot (every decision of an image-born node's first boot, and its record)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from unit_helpers import node_trees

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import image as im
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.modules import image_boot, node_seal

KEY = "k" * 64
KERNEL = os.uname().release


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = "link:" + os.readlink(full) if os.path.islink(full) else "dir"
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                out[os.path.relpath(full, root)] = "link:" + os.readlink(full)
                continue
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = hashlib.sha256(handle.read()).hexdigest()
    return out


def put(root, path, text="x\n", mode=0o644):
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    full.chmod(mode)
    return full


# What a converged node holds that a seal must generalize (path, what happens to it).
GENERALIZED = [
    ("/etc/ssh/ssh_host_ed25519_key", "remove"),
    ("/etc/ssh/ssh_host_ed25519_key.pub", "remove"),
    ("/etc/ssh/ssh_host_rsa_key", "remove"),
    ("/etc/udev/rules.d/70-persistent-net.rules", "remove"),
    ("/var/lib/dhcp/dhclient.eth0.leases", "remove"),
    ("/var/lib/systemd/network/eth0.lease", "remove"),
    ("/var/lib/cloud/instances/i-123/obj.pkl", None),
    ("/var/lib/cloud/instances/i-123", "remove"),
    ("/var/lib/systemd/random-seed", "remove"),
    ("/var/cache/apt/archives/doca-ofed_3.2.1_amd64.deb", "remove"),
    ("/var/cache/apt/pkgcache.bin", "remove"),
    ("/root/.cache/pip/http/a", None),
    ("/root/.cache/pip", "remove"),
    ("/home/ubuntu/.cache/pip/wheels/b", None),
    ("/home/ubuntu/.cache/pip", "remove"),
    ("/root/.bash_history", "remove"),
    ("/root/.python_history", "remove"),
    ("/home/ubuntu/.bash_history", "remove"),
    ("/home/ubuntu/.viminfo", "remove"),
    ("/opt/deepep/verify/intranode.log", "remove"),
    ("/opt/deepep/verify/internode.log", "remove"),
    ("/etc/gpufleet/sglang-serve/prefill.env", None),
    ("/etc/gpufleet/sglang-serve", "remove"),
    ("/etc/machine-id", "empty"),
    # journald's persistent journal of this machine id (the Debian 12 guest of molecule/realvm_image had 8 MB there).
    ("/var/log/journal/0123456789abcdef0123456789abcdef/system.journal", None),
    ("/var/log/journal/0123456789abcdef0123456789abcdef", "remove"),
    ("/var/log/syslog", "empty"),
    ("/var/log/auth.log", "empty"),
    ("/var/log/apt/history.log", "empty"),
    ("/var/log/wtmp", "empty"),
]
# What the image is for: never touched by a seal.
KEPT = ["/etc/modprobe.d/gpufleet-nvidia.conf", "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3",
        "/opt/deepep/nvshmem/.gpufleet-build.json", "/opt/deepep/unified-env.sh", "/usr/lib/doca/doca.conf",
        "/var/lib/dpkg/status", "/root/.ssh/authorized_keys", "/home/ubuntu/.ssh/authorized_keys",
        "/var/cache/deepep/jit/kernel.cubin", "/etc/hostname", "/var/lib/apt/lists/mirror_Packages",
        "/opt/deepep/verify/run_deepep.sh"]


def fake_smi(tmp_path, arch="10.0", count=8, rc=0):
    path = tmp_path / ("smi-%s-%d-%d" % (arch, count, rc))
    lines = "".join("NVIDIA B200, %s\\n" % arch for dummy in range(count))
    path.write_text("#!/bin/sh\nprintf '%s'\nexit %d\n" % (lines, rc))
    path.chmod(0o755)
    return str(path)


def converged_node(tmp_path, nics=("mlx5_0", "mlx5_1")):
    root = tmp_path / "node"
    for path, action in GENERALIZED:
        if path == "/etc/machine-id":
            put(root, path, "0123456789abcdef0123456789abcdef\n")
        elif not any(other.startswith(path + "/") for other, dummy in GENERALIZED):  # a directory's files make it
            put(root, path, "host-specific %s\n" % path)
    for path in KEPT:
        put(root, path, "kept %s\n" % path)
    put(root, "/var/lib/dpkg/status", "Package: doca-ofed\nStatus: install ok installed\nVersion: 3.2.1\n\n")
    put(root, "/opt/deepep/nvshmem/.gpufleet-build.json", json.dumps({"key": "b" * 64, "name": "nvshmem"}))
    dbus = root / "var/lib/dbus"
    dbus.mkdir(parents=True)
    (dbus / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    for nic in nics:
        (root / "sys/class/infiniband" / nic).mkdir(parents=True)
    watch = [str(root / "opt/deepep/unified-env.sh"), str(root / "opt/deepep/nvshmem/lib/libnvshmem_host.so*")]
    content = ss.record_content(KEY, watch, ["doca-ofed"], "2026-11-27T00:00:00+00:00",
                                dpkg_status=str(root / "var/lib/dpkg/status"))
    ss.write_stamp(str(root / "var/lib/gpufleet-site-converged.json"), content)
    return root


def seal(module_runner, tmp_path, root, check=False, diff=False, **extra):
    args = dict(site_key=KEY, root=str(root), nvidia_smi=fake_smi(tmp_path), profile="b200_gcp_cuda129",
                collection_version="0.2.0", cloud_init="cloud-init-absent")
    args.update(extra)
    return module_runner(node_seal, args, check_mode=check, diff=diff)


@pytest.mark.parametrize("path,action", [g for g in GENERALIZED if g[1]])
def test_seal_generalizes_every_host_specific_path(module_runner, tmp_path, path, action):
    root = converged_node(tmp_path)
    result = seal(module_runner, tmp_path, root)
    assert not result.failed, result
    assert {"path": path, "action": action} in [{k: a[k] for k in ("path", "action")} for a in result["actions"]]
    full = root / path.lstrip("/")
    if action == "remove":
        assert not os.path.lexists(full)
    else:
        assert full.is_file() and full.stat().st_size == 0


def test_seal_keeps_the_journal_persistent_without_this_hosts_journal(module_runner, tmp_path):
    root = converged_node(tmp_path)
    result = seal(module_runner, tmp_path, root)
    assert not result.failed, result
    assert (root / "var/log/journal").is_dir() and list((root / "var/log/journal").iterdir()) == []


@pytest.mark.parametrize("path", KEPT)
def test_seal_keeps_what_the_image_is_for(module_runner, tmp_path, path):
    root = converged_node(tmp_path)
    before = (root / path.lstrip("/")).read_bytes()
    result = seal(module_runner, tmp_path, root)
    assert not result.failed, result
    assert (root / path.lstrip("/")).read_bytes() == before
    assert path not in [a["path"] for a in result["actions"]]


def test_seal_links_dbus_machine_id_and_moves_the_stamp_into_the_manifest(module_runner, tmp_path):
    root = converged_node(tmp_path)
    result = seal(module_runner, tmp_path, root)
    assert os.readlink(root / "var/lib/dbus/machine-id") == "/etc/machine-id"
    assert not (root / "var/lib/gpufleet-site-converged.json").exists()
    manifest = json.loads((root / "etc/gpufleet/image.json").read_text())
    assert manifest == result["manifest"]
    assert manifest["site_key"] == KEY and manifest["kernel"] == KERNEL
    assert manifest["gpu"] == {"arch": ["10.0"], "count": 8, "names": ["NVIDIA B200"]}
    assert manifest["nic"] == {"naming": "mlx5", "devices": 2}
    assert manifest["profile"] == "b200_gcp_cuda129" and manifest["collection_version"] == "0.2.0"
    assert manifest["packages"] == {"doca-ofed": "3.2.1"}
    assert manifest["builds"] == {"/opt/deepep/nvshmem/.gpufleet-build.json": {"key": "b" * 64, "name": "nvshmem"}}
    lib = "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3"
    assert manifest["artifacts"][lib] == hashlib.sha256(b"kept %s\n" % lib.encode()).hexdigest()
    assert manifest["site_watch"] == ["/opt/deepep/nvshmem/lib/libnvshmem_host.so*", "/opt/deepep/unified-env.sh"]


@pytest.mark.parametrize("remove", [False, True])
def test_authorized_keys_go_only_when_asked(module_runner, tmp_path, remove):
    root = converged_node(tmp_path)
    result = seal(module_runner, tmp_path, root, remove_authorized_keys=remove)
    for path in ("/root/.ssh/authorized_keys", "/home/ubuntu/.ssh/authorized_keys"):
        assert os.path.exists(root / path.lstrip("/")) is not remove
        assert (path in [a["path"] for a in result["actions"]]) is remove


@pytest.mark.parametrize("extra", [["/opt/site/host.conf"], ["/opt/site/*.conf"]])
def test_extra_paths_are_removed(module_runner, tmp_path, extra):
    root = converged_node(tmp_path)
    put(root, "/opt/site/host.conf")
    assert not seal(module_runner, tmp_path, root, extra_paths=extra).failed
    assert not (root / "opt/site/host.conf").exists()


@pytest.mark.parametrize("present,rc", [(True, 0), (True, 1), (False, None)])
def test_cloud_init_clean_runs_where_installed(module_runner, tmp_path, present, rc):
    root = converged_node(tmp_path)
    log = tmp_path / "cloud-init.args"
    if present:
        put(root, "/usr/bin/cloud-init", "#!/bin/sh\n", 0o755)
    calls = []

    def runner(argv, timeout):
        if argv[0].endswith("nvidia-smi") or "smi" in argv[0]:
            return 0, "NVIDIA B200, 10.0\n", ""
        calls.append((argv, timeout))
        log.write_text(" ".join(argv))
        return rc, "", "boom" if rc else ""

    class Mod:
        params = dict(site_key=KEY, nvidia_smi="nvidia-smi", profile="", collection_version="",
                      cloud_init="cloud-init", journalctl="journalctl", remove_authorized_keys=False,
                      extra_paths=[], timeout=77,
                      build_stamps=[], stamp=im.DEFAULT_STAMP, manifest=im.DEFAULT_MANIFEST)
        check_mode = False
        _diff = False

        def fail_json(self, **kw):
            raise AssertionError(kw)

    with node_trees(node_seal, {"root": str(root)}):
        result = node_seal.run(Mod(), runner=runner)
    if present:
        assert calls == [(["/usr/bin/cloud-init", "clean", "--logs"], 77)]
        assert result["commands"][0]["rc"] == rc
    else:
        assert calls == [] and result["commands"] == []


def _seal_with_runner(root, runner, check_mode=False):
    class Mod:
        params = dict(site_key=KEY, nvidia_smi="nvidia-smi", profile="", collection_version="",
                      cloud_init="cloud-init", journalctl="journalctl", remove_authorized_keys=False,
                      extra_paths=[], timeout=77, build_stamps=[], stamp=im.DEFAULT_STAMP, manifest=im.DEFAULT_MANIFEST)
        _diff = False

        def fail_json(self, **kw):
            raise AssertionError(kw)

    mod = Mod()
    mod.check_mode = check_mode
    with node_trees(node_seal, {"root": str(root)}):
        return node_seal.run(mod, runner=runner)


@pytest.mark.parametrize("rc", [0, 1])
def test_journald_relinquishes_var_before_its_journal_goes(tmp_path, rc):
    # On a Debian 12 guest journald created /var/log/journal/<old machine id>/system.journal again at once after the
    # directory was removed under it (the shutdown's log went into the image): it must stop writing there first.
    root = converged_node(tmp_path)
    put(root, "/usr/bin/journalctl", "#!/bin/sh\n", 0o755)
    journal = root / "var/log/journal/0123456789abcdef0123456789abcdef"
    calls = []

    def runner(argv, timeout):
        if "smi" in argv[0]:
            return 0, "NVIDIA B200, 10.0\n", ""
        calls.append((argv, timeout, journal.exists()))
        return rc, "", "Unknown option --relinquish-var" if rc else ""

    predicted = _seal_with_runner(root, runner, check_mode=True)
    assert calls == [] and journal.exists()
    result = _seal_with_runner(root, runner)
    assert predicted["actions"] == result["actions"]
    kinds = [(a["action"], a["path"]) for a in result["actions"]]
    run = ("run", "/usr/bin/journalctl --relinquish-var")
    assert run in kinds and kinds.index(run) < kinds.index(("remove", "/var/log/journal/0123456789abcdef0123456789abcdef"))
    # Run while the journal was still there, then the journal removed whatever journalctl answered.
    assert calls == [(["/usr/bin/journalctl", "--relinquish-var"], 77, True)]
    assert result["commands"][0]["rc"] == rc and not journal.exists()
    # A node without a persistent journal plans no journalctl run; neither does the second seal.
    calls.clear()
    again = _seal_with_runner(root, runner)
    assert calls == [] and ("run", "/usr/bin/journalctl --relinquish-var") not in [(a["action"], a["path"]) for a in again["actions"]]


def test_check_mode_predicts_exactly_and_writes_nothing(module_runner, tmp_path):
    root = converged_node(tmp_path)
    before = snapshot(root)
    predicted = seal(module_runner, tmp_path, root, check=True, diff=True)
    assert not predicted.failed and predicted["changed"]
    assert snapshot(root) == before
    assert predicted["diff"][0]["before"].splitlines() == [a["path"] for a in predicted["actions"]]
    done = seal(module_runner, tmp_path, root)
    assert [a["path"] for a in done["actions"]] == [a["path"] for a in predicted["actions"]]
    after = snapshot(root)
    touched = {a["path"].lstrip("/") for a in done["actions"]}
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed - {"etc/gpufleet", "etc/gpufleet/image.json"} <= {
        p for p in changed if any(p == t or p.startswith(t + "/") for t in touched)}


def test_second_seal_changes_nothing(module_runner, tmp_path):
    root = converged_node(tmp_path)
    first = seal(module_runner, tmp_path, root)
    before = snapshot(root)
    second = seal(module_runner, tmp_path, root)
    assert not second.failed and not second["changed"] and second["sealed"] and second["actions"] == []
    assert second["manifest"] == first["manifest"]
    assert snapshot(root) == before


@pytest.mark.parametrize("damage,named", [
    ("missing", "no converged stamp"),
    ("drift", "unified-env.sh"),
    ("key", "the settings or the collection changed"),
])
def test_a_node_not_converged_and_intact_is_refused(module_runner, tmp_path, damage, named):
    root = converged_node(tmp_path)
    stamp = root / "var/lib/gpufleet-site-converged.json"
    if damage == "missing":
        stamp.unlink()
    elif damage == "drift":
        (root / "opt/deepep/unified-env.sh").write_text("edited\n")
    else:
        data = json.loads(stamp.read_text())
        data["key"] = "z" * 64
        stamp.write_text(json.dumps(data))
    before = snapshot(root)
    result = seal(module_runner, tmp_path, root)
    assert result.failed and "not converged and intact" in result["msg"] and "expected" in result["msg"]
    assert named in result["msg"].lower() or named in result["msg"], result["msg"]
    assert snapshot(root) == before


def test_a_node_whose_gpus_cannot_be_read_is_refused(module_runner, tmp_path):
    root = converged_node(tmp_path)
    before = snapshot(root)
    result = seal(module_runner, tmp_path, root, nvidia_smi=fake_smi(tmp_path, rc=9))
    assert result.failed and "nvidia-smi" in result["msg"] and "expected" in result["msg"]
    assert snapshot(root) == before


# ------------------------------------------------------------------------------------------------- first boot
MANIFEST = {"format": 1, "site_key": KEY, "kernel": "6.8.0-52-generic", "gpu": {"arch": ["10.0"], "count": 8},
            "nic": {"naming": "mlx5", "devices": 8}, "site_watch": [], "site_packages": [], "sealed_at": "t"}
NODE = {"kernel": "6.8.0-52-generic", "gpu": {"arch": ["10.0"], "count": 8}, "nic": {"naming": "mlx5", "devices": 8},
        "machine_id": "abc"}


@pytest.mark.parametrize("node_change,key,lane,named", [
    ({}, KEY, "image", ["host-specific work only"]),
    ({"gpu": {"arch": ["10.0"], "count": 4}}, KEY, "image", ["host-specific"]),
    ({"nic": {"naming": "mlx5", "devices": 4}}, KEY, "image", ["host-specific"]),
    ({}, "o" * 64, "converge", ["other settings", "every phase runs"]),
    ({"kernel": "6.8.0-60-generic"}, KEY, "refused", ["kernel 6.8.0-60-generic", "baked for 6.8.0-52-generic"]),
    ({"gpu": {"arch": ["9.0"], "count": 8}}, KEY, "refused", ["GPU arch 9.0", "built for 10.0"]),
    ({"gpu": {"arch": [], "count": 0}}, KEY, "refused", ["GPU arch none"]),
    ({"nic": {"naming": "rocep", "devices": 8}}, KEY, "refused", ["NIC naming rocep", "mlx5 in the image"]),
    ({"nic": {"naming": "none", "devices": 0}}, KEY, "refused", ["NIC naming none"]),
    ({"machine_id": ""}, KEY, "refused", ["has not booted since it was sealed"]),
    ({"kernel": "5.15.0-1-generic", "nic": {"naming": "ibp", "devices": 8}}, "o" * 64, "refused",
     ["kernel 5.15.0-1-generic", "NIC naming ibp"]),
])
def test_boot_decision(node_change, key, lane, named):
    decision = im.boot_decision(MANIFEST, dict(NODE, **node_change), key)
    assert decision["lane"] == lane
    for text in named:
        assert text in decision["reason"], decision["reason"]
    assert bool(decision["refusals"]) is (lane == "refused")


@pytest.mark.parametrize("names,naming", [([], "none"), (["mlx5_0", "mlx5_1"], "mlx5"),
                                          (["rocep145s0", "rocep146s0"], "rocep"), (["ibp24s0"], "ibp"),
                                          (["mlx5_0", "rocep1s0"], "mixed:mlx5,rocep")])
def test_nic_naming(tmp_path, names, naming):
    for name in names:
        (tmp_path / "sys/class/infiniband" / name).mkdir(parents=True)
    assert im.nic_facts(str(tmp_path)) == {"naming": naming, "devices": len(names)}


def booted_node(module_runner, tmp_path):
    root = converged_node(tmp_path)
    assert not seal(module_runner, tmp_path, root).failed
    (root / "etc/machine-id").write_text("fedcba9876543210fedcba9876543210\n")  # systemd, at first boot
    return root


def boot(module_runner, tmp_path, root, check=False, **extra):
    args = dict(site_key=KEY, root=str(root), nvidia_smi=fake_smi(tmp_path))
    args.update(extra)
    return module_runner(image_boot, args, check_mode=check)


def test_no_manifest_means_not_image_born(module_runner, tmp_path):
    root = converged_node(tmp_path)
    result = boot(module_runner, tmp_path, root)
    assert not result.failed and not result["changed"]
    assert result["ansible_facts"]["gpufleet_image"]["lane"] == "none"
    assert not result["ansible_facts"]["gpufleet_image"]["present"]


@pytest.mark.parametrize("smi,key,lane", [(("10.0", 8), KEY, "image"), (("9.0", 8), KEY, "refused"),
                                          (("10.0", 8), "o" * 64, "converge")])
def test_image_boot_check_decides_and_writes_nothing(module_runner, tmp_path, smi, key, lane):
    root = booted_node(module_runner, tmp_path)
    before = snapshot(root)
    result = boot(module_runner, tmp_path, root, site_key=key, nvidia_smi=fake_smi(tmp_path, *smi))
    assert not result.failed and not result["changed"]
    facts = result["ansible_facts"]["gpufleet_image"]
    assert facts["lane"] == lane and facts["present"]
    assert facts["node"]["kernel"] == KERNEL and facts["node"]["machine_id"] is True
    assert snapshot(root) == before


def test_booted_records_the_stamp_the_next_run_finds_intact(module_runner, tmp_path):
    root = booted_node(module_runner, tmp_path)
    before = snapshot(root)
    predicted = boot(module_runner, tmp_path, root, check=True, state="booted")
    assert predicted["changed"] and snapshot(root) == before
    result = boot(module_runner, tmp_path, root, state="booted")
    assert not result.failed and result["changed"], result
    stamp = json.loads((root / "var/lib/gpufleet-site-converged.json").read_text())
    watched = ["/opt/deepep/nvshmem/lib/libnvshmem_host.so*", "/opt/deepep/unified-env.sh"]
    assert stamp["key"] == KEY and sorted(stamp["watch"]) == watched
    record = json.loads((root / "etc/gpufleet/image-boot.json").read_text())
    assert record["machine_id"] == "fedcba9876543210fedcba9876543210" and record["site_key"] == KEY
    again = boot(module_runner, tmp_path, root, state="booted")
    assert not again.failed and not again["changed"]


@pytest.mark.parametrize("smi,key,named", [(("9.0", 8), KEY, "'refused'"), (("10.0", 8), "o" * 64, "'converge'")])
def test_booted_is_refused_outside_the_image_lane(module_runner, tmp_path, smi, key, named):
    root = booted_node(module_runner, tmp_path)
    before = snapshot(root)
    result = boot(module_runner, tmp_path, root, state="booted", site_key=key, nvidia_smi=fake_smi(tmp_path, *smi))
    assert result.failed and named in result["msg"] and "expected an image-born node" in result["msg"]
    assert snapshot(root) == before


@pytest.mark.parametrize("text,named", [("{", "is not JSON"), ("[]", "is not a JSON object"),
                                        ('{"format": 2}', "format 2"),
                                        ('{"format": 1, "site_key": 3}', "site_key is 3")])
def test_a_malformed_manifest_is_refused_naming_the_file(module_runner, tmp_path, text, named):
    root = converged_node(tmp_path)
    put(root, "/etc/gpufleet/image.json", text)
    before = snapshot(root)
    result = boot(module_runner, tmp_path, root)
    assert result.failed and named in result["msg"] and "image.json" in result["msg"]
    assert "expected the manifest node_seal writes" in result["msg"]
    assert snapshot(root) == before
