# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Golden images: sealing a converged node for capture, and the first boot of a node born from its image.

Sealing (``node_seal``) generalizes a node the way azhpc-images and ParallelCluster's ``ami_cleanup.sh`` do before
a capture, and no further: the node's identity goes (``/etc/machine-id`` emptied, not deleted, so systemd writes a
fresh one at first boot; ``/var/lib/dbus/machine-id`` becomes the link to it; SSH host keys, regenerated at first
boot by cloud-init or the cloud's guest agent), its history goes (cloud-init's state, DHCP leases, shell histories, the persistent journal's
directories, logs truncated, not deleted), caches go (apt, pip), udev's ``70-persistent-net.rules`` goes, and what the collection wrote for this host
only goes (its site stamp, whose watch list moves into the image manifest; verify logs; serving units). What the image is for stays:
driver options, DOCA, the builds, the env script.

The plan is data (``plan_seal``: a list of actions, each a path and what happens to it), so check mode returns it
exactly and ``apply_seal`` does only what it lists. The image manifest records what the image holds (versions, build
keys, artifact checksums, the profile, the collection version) and what it is valid for: one kernel (``uname -r``;
DKMS and precompiled modules are built for it), one GPU arch and one NIC naming. ``boot_decision`` holds an
image-born node against it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import stat

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_json_dict, read_text, write_json_file
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import naming_scheme

MANIFEST_FORMAT = 1
DEFAULT_MANIFEST = "/etc/gpufleet/image.json"
DEFAULT_STAMP = "/var/lib/gpufleet-site-converged.json"
KEY_RE = re.compile(r"^[0-9A-Za-z._-]{1,128}$")
NAME_RE = re.compile(r"^[0-9A-Za-z._+-]{1,64}$")

# What every seal removes (globs under the node's root). Kept: /etc/modprobe.d, DOCA, /opt/deepep, the env script.
REMOVE = [
    "/etc/ssh/ssh_host_*",
    "/etc/udev/rules.d/70-persistent-net.rules",
    "/var/lib/dhcp/*.leases", "/var/lib/dhclient/*.leases", "/var/lib/NetworkManager/*.lease",
    "/var/lib/systemd/network/*.lease*", "/run/systemd/netif/leases/*",
    "/var/lib/cloud/instances/*", "/var/lib/cloud/instance", "/run/cloud-init",
    "/var/lib/systemd/random-seed",
    "/var/cache/apt/archives/*.deb", "/var/cache/apt/*.bin",
    "/root/.cache/pip", "/home/*/.cache/pip",
    "/root/.bash_history", "/root/.python_history", "/root/.lesshst", "/root/.viminfo", "/root/.wget-hsts",
    "/home/*/.bash_history", "/home/*/.python_history", "/home/*/.lesshst", "/home/*/.viminfo",
]
# systemd-journald's persistent journal: a directory per machine id under /var/log/journal. Kept in an image, it is
# every clone's journal too (journalctl reads all of them beside the clone's own): this host's logins, addresses and
# names. The directory /var/log/journal stays (its presence makes the journal persistent).
JOURNALS = ["/var/log/journal/*"]
AUTHORIZED_KEYS = ["/root/.ssh/authorized_keys", "/home/*/.ssh/authorized_keys"]
# Emptied, not deleted: systemd fills an empty machine-id at first boot (a missing one means "first boot" to some
# versions, and read-only roots need the file); logs keep their files and owners for the daemons that hold them.
EMPTY = ["/etc/machine-id"]
LOG_GLOBS = ["/var/log/*.log", "/var/log/*/*.log", "/var/log/syslog", "/var/log/messages", "/var/log/auth.log",
             "/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog", "/var/run/utmp"]
DBUS_MACHINE_ID = "/var/lib/dbus/machine-id"
# What the collection writes for one host only (besides the site stamp, moved into the manifest).
# The verify roles' logs of this host's test runs (their launcher, run_deepep.sh, stays), the serving units (each
# names this host's address and rank), the first-boot record.
HOST_PATHS = ["/opt/deepep/verify/*.log", "/etc/gpufleet/sglang-serve", "/etc/gpufleet/image-boot.json"]
BOOT_RECORD = "/etc/gpufleet/image-boot.json"


class ImageError(Exception):
    """A refusal: the message names the option or file, the value and the expected form."""


def under(root, path):
    """``path`` (absolute) under ``root``."""
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def _outside(root, path):
    return "/" + os.path.relpath(path, root) if root not in ("", "/") else path


def _matches(root, pattern):
    full = under(root, pattern)
    if any(c in pattern for c in "*?["):
        return sorted(glob.glob(full))
    return [full] if os.path.lexists(full) else []


def check_paths(option, paths):
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/") or "\n" in path or path.rstrip("/") == "" \
                or "/../" in path + "/":
            raise ImageError("%s entry %r is not an absolute path (expected a path or glob pattern such as "
                             "/opt/deepep/verify/runs, not / and without '..')" % (option, path))


def check_key(option, value):
    if not isinstance(value, str) or not KEY_RE.fullmatch(value):
        raise ImageError("%s %r is not a settings key (expected 1 to 128 characters of [0-9A-Za-z._-], such as the "
                         "gpufleet_site_key site_plan computed)" % (option, value))


def check_name(option, value, empty_ok=True):
    if value == "" and empty_ok:
        return
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ImageError("%s %r is not a name (expected 1 to 64 characters of [0-9A-Za-z._+-]%s)"
                         % (option, value, ", or empty" if empty_ok else ""))


def plan_seal(root="/", remove_authorized_keys=False, extra_paths=(), cloud_init=None, stamp=DEFAULT_STAMP,
              journalctl=None):
    """Every action of the seal, in order: ``{"path", "action", "why"}``; action is one of ``remove`` (a file, a
    link or a directory tree), ``empty`` (a file truncated to 0 bytes), ``link`` (dbus' machine-id made the link to
    /etc/machine-id) and ``run`` (a command, ``path`` its argv joined). Only what is there and not already as the
    seal leaves it is listed, so a sealed node plans nothing."""
    actions = []
    seen = set()

    def add(full, action, why):
        if full in seen:
            return
        seen.add(full)
        actions.append({"path": _outside(root, full), "action": action, "why": why})

    if cloud_init:
        actions.append({"path": "%s clean --logs" % cloud_init, "action": "run",
                        "why": "cloud-init's instance state and logs (the next boot is a first boot)"})
    if journalctl and any(_matches(root, pattern) for pattern in JOURNALS):
        # journald keeps its file open and, once it is deleted, creates it again under the old machine id (it logs
        # "Journal file has been deleted, rotating"): from here to the next boot it writes to /run only.
        actions.append({"path": "%s --relinquish-var" % journalctl, "action": "run",
                        "why": "systemd-journald writes to /run until the next boot, not to this host's journal"})
    for pattern in EMPTY:
        for full in _matches(root, pattern):
            if os.path.isfile(full) and not os.path.islink(full) and os.path.getsize(full) > 0:
                add(full, "empty", "the machine id (systemd writes a fresh one at first boot)")
    dbus = under(root, DBUS_MACHINE_ID)
    if os.path.lexists(dbus) and not (os.path.islink(dbus) and os.readlink(dbus) == "/etc/machine-id"):
        add(dbus, "link", "dbus' copy of the machine id, made the link to /etc/machine-id")
    groups = [(REMOVE, "host identity, history or cache"),
              (JOURNALS, "this host's journal (a clone would carry it beside its own)"),
              (AUTHORIZED_KEYS if remove_authorized_keys else [], "login keys (remove_authorized_keys)"),
              (HOST_PATHS, "written by the collection for this host only"),
              (list(extra_paths), "extra_paths")]
    for patterns, why in groups:
        for pattern in patterns:
            for full in _matches(root, pattern):
                add(full, "remove", why)
    stamp_full = under(root, stamp)
    if os.path.lexists(stamp_full):
        add(stamp_full, "remove", "the site stamp of this host (its watch list goes into the image manifest)")
    for pattern in LOG_GLOBS:
        for full in _matches(root, pattern):
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size > 0 and full not in seen:
                add(full, "empty", "log truncated (kept for the daemons that hold it)")
    return actions


def _remove(path):
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.rmdir(full)
    os.rmdir(path)


def apply_seal(actions, root="/", runner=None, timeout=120):
    """Do each action of ``plan_seal``; returns the commands run ``[{cmd, rc, stderr}]``. A command that fails is
    reported, not fatal (cloud-init may be half installed); a file that vanished meanwhile is no error."""
    ran = []
    for act in actions:
        full = under(root, act["path"]) if act["action"] != "run" else None
        if act["action"] == "run":
            argv = act["path"].split()
            rc, dummy, err = runner(argv, timeout)
            ran.append({"cmd": argv, "rc": rc, "stderr": err.strip()[-400:]})
        elif act["action"] == "empty":
            with open(full, "r+b") as handle:
                handle.truncate(0)
        elif act["action"] == "link":
            if os.path.lexists(full):
                os.unlink(full)
            os.symlink("/etc/machine-id", full)
        else:
            try:
                _remove(full)
            except FileNotFoundError:
                pass
    return ran


def nic_facts(root="/"):
    """``{"naming", "devices"}`` of /sys/class/infiniband: one scheme (mlx5, rocep, ibp, other), mixed, or none."""
    base = under(root, "/sys/class/infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        names = []
    schemes = sorted({naming_scheme(n) for n in names})
    naming = schemes[0] if len(schemes) == 1 else ("none" if not schemes else "mixed:" + ",".join(schemes))
    return {"naming": naming, "devices": len(names)}


def gpu_facts(nvidia_smi, runner, timeout):
    """``{"arch", "count", "names"}`` from nvidia-smi (compute capabilities, sorted unique); refusal when it fails."""
    argv = [nvidia_smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"]
    rc, out, err = runner(argv, timeout)
    if rc != 0:
        raise ImageError("nvidia-smi %r failed (rc %s): %s (expected the GPUs of the node to be readable: a node "
                         "without a working driver is not a node to image or to boot from an image)"
                         % (nvidia_smi, rc, (err or out).strip()[-300:]))
    names, caps = [], []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[1]:
            names.append(parts[0])
            caps.append(parts[1])
    return {"arch": sorted(set(caps)), "count": len(caps), "names": sorted(set(names))}


def kernel_release(root="/"):
    """The running kernel (``uname -r``)."""
    return os.uname().release


def build_records(root, patterns):
    """``{path: {key, ...}}`` of the build stamps (``<prefix>/.gpufleet-build.json``) matched by ``patterns``."""
    out = {}
    for pattern in patterns:
        for full in _matches(root, pattern):
            data = read_json_dict(full)
            if data is None:
                raise ImageError("build stamp %s is not a JSON object (expected the stamp a build of the collection "
                                 "writes; rebuild or remove it)" % _outside(root, full))
            out[_outside(root, full)] = {k: data[k] for k in ("key", "name", "version", "kind") if k in data}
    return out


def stamp_for_image(stamp_path, key, dpkg_status="/var/lib/dpkg/status"):
    """The site stamp of a converged, intact node (its check against ``key``), or ImageError with the reason."""
    state = ss.check(stamp_path, key, dpkg_status=dpkg_status)
    if not state["intact"]:
        raise ImageError("the node is not converged and intact, so it is no image: %s (expected a node that a "
                         "full run of playbooks/site.yml left intact: run it, then seal)" % state["reason"])
    stamp, dummy = ss.read_stamp(stamp_path)
    return stamp


def artifacts_of(stamp):
    """``{path: sha256}`` of every file the stamp fingerprints by content (glob matches included)."""
    out = {}

    def walk(name, fp):
        if fp.get("kind") == "file" and fp.get("sha256"):
            out[name] = fp["sha256"]
        for sub, sub_fp in (fp.get("matches") or {}).items():
            walk(sub, sub_fp)

    for name, fp in (stamp.get("watch") or {}).items():
        walk(name, fp)
    return out


def make_manifest(stamp, key, profile, collection_version, kernel, gpus, nics, builds, sealed_at):
    return {
        "format": MANIFEST_FORMAT, "sealed_at": sealed_at, "site_key": key, "profile": profile,
        "collection_version": collection_version, "kernel": kernel,
        "gpu": gpus, "nic": nics, "builds": builds,
        "packages": dict(stamp.get("packages") or {}),
        "artifacts": artifacts_of(stamp),
        "site_watch": sorted(stamp.get("watch") or {}),
        "site_packages": sorted(stamp.get("packages") or {}),
        "stamp_recorded_at": stamp.get("recorded_at"),
    }


def relative_to_root(manifest, root):
    """Paths of the manifest as the node sees them, where the stamp was read under a test root."""
    if root in ("", "/"):
        return manifest
    prefix = root.rstrip("/") + "/"

    def strip(path):
        return "/" + path[len(prefix):] if path.startswith(prefix) else path

    manifest["site_watch"] = [strip(w) for w in manifest["site_watch"]]
    manifest["artifacts"] = {strip(k): v for k, v in manifest["artifacts"].items()}
    return manifest


def manifest_problem(path, data):
    """Why ``data`` read from ``path`` is not an image manifest; None when it is one."""
    if not isinstance(data, dict):
        return "image manifest %s is not a JSON object" % path
    if data.get("format") != MANIFEST_FORMAT:
        return "image manifest %s has format %r (expected %d)" % (path, data.get("format"), MANIFEST_FORMAT)
    shapes = {"site_key": str, "kernel": str, "gpu": dict, "nic": dict, "site_watch": list, "site_packages": list}
    for name, kind in shapes.items():
        if not isinstance(data.get(name), kind):
            return "image manifest %s: %s is %r (expected a %s)" % (path, name, data.get(name), kind.__name__)
    if not isinstance(data["gpu"].get("arch"), list) or not isinstance(data["nic"].get("naming"), str):
        return "image manifest %s: gpu.arch must be a list and nic.naming a string" % path
    return None


def read_manifest(path):
    """The manifest at ``path``, None when there is none; ImageError naming the file when it is malformed."""
    if not os.path.lexists(path):
        return None
    text = read_text(path)
    try:
        data = json.loads(text) if text is not None else None
    except ValueError as exc:
        raise ImageError("image manifest %s is not JSON (%s): expected the manifest node_seal writes; remove it "
                         "to converge the node from source" % (path, exc))
    why = manifest_problem(path, data)
    if why:
        raise ImageError(why + ": expected the manifest node_seal writes; remove it to converge the node from source")
    return data


def write_manifest(path, data):
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    write_json_file(path, data, tmp_prefix=".gpufleet-image.")


def boot_decision(manifest, node, key):
    """Whether an image-born node may take the fast first boot: ``{"lane", "refusals", "reason"}``.

    ``lane`` is ``image`` (host-specific work only), ``refused`` (the image does not fit this node: another kernel,
    GPU arch or NIC naming; each named in ``refusals``), or ``converge`` (the image was baked with other settings or
    another collection: the node goes through every phase of site.yml, which is correct but not fast)."""
    refusals = []
    if node.get("machine_id") == "":
        refusals.append("/etc/machine-id is empty: the node has not booted since it was sealed (systemd writes it "
                        "at first boot; boot the node, then converge it)")
    if manifest["kernel"] != node["kernel"]:
        refusals.append("kernel %s is running but the image was baked for %s (its DKMS and precompiled modules are "
                        "built for that kernel only: boot the image's kernel, or bake an image for this one)"
                        % (node["kernel"], manifest["kernel"]))
    if sorted(manifest["gpu"].get("arch") or []) != sorted(node["gpu"].get("arch") or []):
        refusals.append("GPU arch %s on this node but the image was built for %s (its builds carry that arch list)"
                        % (",".join(node["gpu"].get("arch") or []) or "none",
                           ",".join(manifest["gpu"].get("arch") or []) or "none"))
    if manifest["nic"].get("naming") != node["nic"].get("naming"):
        naming = manifest["nic"].get("naming")
        refusals.append("NIC naming %s on this node but %s in the image (the driver stack in the image names "
                        "its HCAs %s)" % (node["nic"].get("naming"), naming, naming))
    if refusals:
        return {"lane": "refused", "refusals": refusals,
                "reason": "the image does not fit this node: " + "; ".join(refusals)}
    if manifest["site_key"] != key:
        return {"lane": "converge", "refusals": [],
                "reason": "the image was baked with other settings or another collection (key %s, now %s): "
                          "every phase runs" % (manifest["site_key"][:12], key[:12])}
    return {"lane": "image", "refusals": [],
            "reason": "image-born node (sealed %s, kernel %s): host-specific work only"
                      % (manifest.get("sealed_at"), manifest["kernel"])}


def machine_id(root="/"):
    return (read_text(under(root, "/etc/machine-id")) or "").strip()
