# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmfleet's GPU guests without booting anything: the image variant, the kernel command line the guest's boot unit
reads (tools/vmfleet/gpuboot.py), the fleet's refusals and the QEMU command line of a GPU guest and of its clones."""

from __future__ import annotations

import json

import pytest

from tools.fleetsim import fakehw
from tools.vmfleet import fleet as fleet_mod
from tools.vmfleet import gpuboot, image
from tools.vmfleet.common import VmError


def test_gpu_variant_is_its_own_image_and_leaves_the_base_key_alone():
    packages, files = image.variant(gpu=True)
    assert set(image.PACKAGES) < set(packages) and {"build-essential", "cmake", "git", "python3-yaml"} <= set(packages)
    assert files["vmfleet-gpu.service"] == ("etc/systemd/system/vmfleet-gpu.service", 0o644)
    assert image.variant(gpu=False) == (image.PACKAGES, image.GUEST_FILES)
    assert "vmfleet-gpu.service" not in image.GUEST_FILES
    assert image.image_key(packages, files) != image.image_key()
    assert image.image_dir() == image.BUILD_DIR / f"image-{image.image_key(image.PACKAGES, image.GUEST_FILES)}"
    # The GPU image renders the profile's RDMA devices: soft-RoCE is not enabled there.
    assert image._units(files) == ["vmfleet-identity.service", "vmfleet-pyzygote.service", "vmfleet-gpu.service"]
    assert image._units(image.GUEST_FILES) == ["vmfleet-identity.service", "vmfleet-pyzygote.service",
                                               "vmfleet-rxe.service"]


def test_the_gpu_unit_runs_only_on_gpu_guests_before_sshd():
    text = (image.GUEST / "vmfleet-gpu.service").read_text(encoding="utf-8")
    assert "ConditionKernelCommandLine=vmfleet.gpu\n" in text
    assert "Before=ssh.service\n" in text and "systemd-logind.service\n" in text
    assert "ExecStart=/usr/bin/python3 -m tools.vmfleet.gpuboot\n" in text
    assert "mount_tag" not in text and " vmfleet-tools /run/vmfleet-gpu/src/tools\n" in text


@pytest.mark.parametrize("cmdline,name,expected", [
    ("root=/dev/vda vmfleet.gpu=gcp_b200:2 quiet", "gpu", "gcp_b200:2"),
    ("vmfleet.gpu=h100_ib:1 vmfleet.gpu=gcp_b200:3", "gpu", "gcp_b200:3"),
    ("root=/dev/vda vmfleet.hostname=x", "gpu", None),
    ("vmfleet.gpuX=1 vmfleet.torch=real", "torch", "real"),
])
def test_cmdline_arg(cmdline, name, expected):
    assert gpuboot.cmdline_arg(cmdline, name) == expected


def test_parse_gpu_takes_a_profile_and_a_positive_index():
    assert gpuboot.parse_gpu("gcp_b200:3") == ("gcp_b200", 3)


@pytest.mark.parametrize("value,expected", [
    (None, r"vmfleet.gpu=None is invalid: expected PROFILE:INDEX"),
    ("gcp_b200", r"vmfleet.gpu='gcp_b200' is invalid: expected PROFILE:INDEX"),
    ("gcp_b200:0", r"vmfleet.gpu='gcp_b200:0' is invalid"),
    ("gcp_b200:x", r"vmfleet.gpu='gcp_b200:x' is invalid"),
    (":1", r"vmfleet.gpu=':1' is invalid"),
    ("b300:1", r"vmfleet.gpu='b300:1': no profile 'b300': expected one of \["),
])
def test_parse_gpu_refuses_bad_values_naming_them(value, expected):
    with pytest.raises(gpuboot.GpuBootError, match=expected):
        gpuboot.parse_gpu(value)


def test_guest_keeps_its_real_systemctl_and_reboot():
    assert sorted(gpuboot.GUEST_TOOLS.values()) == ["fleetsim-nic-traffic.py", "modprobe.py", "modprobe.py"]
    assert {"usr/sbin/modprobe", "usr/sbin/lsmod"} <= set(gpuboot.GUEST_TOOLS)
    assert not {"usr/bin/systemctl", "usr/sbin/reboot", "usr/sbin/shutdown"} & set(gpuboot.GUEST_TOOLS)


def _fleet(tmp_path, monkeypatch, state=None):
    monkeypatch.setattr(fleet_mod, "STATE_DIR", tmp_path)
    fleet = fleet_mod.Fleet("g", fleet_mod.Stages(quiet=True))
    if state is not None:
        fleet.dir.mkdir(parents=True)
        fleet.save(state)
    return fleet


def test_unknown_gpu_profile_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    fleet = _fleet(tmp_path, monkeypatch)
    monkeypatch.setattr(fleet_mod, "ensure_image", lambda *a: pytest.fail("the image was looked at"))
    with pytest.raises(VmError, match=r"--gpu-profile 'b300' is invalid: expected one of \[.*'gcp_b200'"):
        fleet.up("b200_cluster", 1, "tcg", gpu_profile="b300")
    assert not fleet.dir.exists()


@pytest.mark.parametrize("running,asked,expected", [
    (None, "gcp_b200", "fleet g runs plain guests .no --gpu-profile., not GPU guests of profile gcp_b200"),
    ("gcp_b200", None, "fleet g runs GPU guests of profile gcp_b200, not plain guests .no --gpu-profile."),
    ("gcp_b200", "h100_ib", "fleet g runs GPU guests of profile gcp_b200, not GPU guests of profile h100_ib"),
])
def test_a_fleet_runs_one_kind_of_guest(tmp_path, monkeypatch, running, asked, expected):
    state = {"fleet": "g", "nodes": {}, "image": str(tmp_path / "image-x"), "mcast_port": 1}
    if running:
        state["gpu_profile"] = running
    fleet = _fleet(tmp_path, monkeypatch, state)
    monkeypatch.setattr(fleet_mod, "ensure_image", lambda *a: pytest.fail("the image was looked at"))
    with pytest.raises(VmError, match=expected + ": take it down first"):
        fleet.up("x", 1, "tcg", gpu_profile=asked)


def _argv_of_up(tmp_path, monkeypatch, **kwargs):
    """Boot GPU guests with QEMU, SSH and the mirror replaced; return the fleet and the QEMU command lines."""
    fleet = _fleet(tmp_path, monkeypatch)
    (tmp_path / "image-gpu").mkdir()
    asked = []
    monkeypatch.setattr(fleet_mod, "ensure_image", lambda stages, packages, files: asked.append(files) or tmp_path / "image-gpu")
    monkeypatch.setattr(fleet_mod, "gpu_mirror", lambda: tmp_path / "mirror")
    qemu = []

    def fake_run(argv, timeout, check=True, **kw):
        if argv[0] == fleet_mod.QEMU:
            qemu.append(argv)
            name = argv[argv.index("-name") + 1].removeprefix(fleet.needle(""))
            (fleet.dir / name / "qemu.pid").write_text("4242\n")
        return fleet_mod.subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(fleet_mod, "run", fake_run)
    fleet.dir.mkdir(parents=True)
    fleet.key.write_text("k\n")
    fleet.key.with_suffix(".pub").write_text("ssh-ed25519 AAAA t\n")
    monkeypatch.setattr(fleet, "_wait_ssh", lambda *a: None)
    monkeypatch.setattr(fleet, "_wait_rxe", lambda *a: pytest.fail("GPU guests have no soft-RoCE to wait for"))
    waited = []
    monkeypatch.setattr(fleet, "_wait_gpu", waited.append)
    fleet.up("b200_cluster", 2, "tcg", **kwargs)
    return fleet, qemu, waited, asked


def test_gpu_guests_boot_the_gpu_image_with_their_profile_index_and_shares(tmp_path, monkeypatch):
    fleet, qemu, waited, asked = _argv_of_up(tmp_path, monkeypatch, gpu_profile="gcp_b200")
    assert asked == [image.variant(gpu=True)[1]]
    assert waited == ["b200-cluster-1", "b200-cluster-2"]
    state = fleet.load()
    assert state["gpu_profile"] == "gcp_b200" and state["gpu_mirror"] == str(tmp_path / "mirror")
    for seq, argv in enumerate(qemu, start=1):
        append = argv[argv.index("-append") + 1]
        assert f" vmfleet.gpu=gcp_b200:{seq}" in append
        shares = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-virtfs"]
        assert shares == [f"local,path={fleet_mod.TOOLS_DIR},mount_tag=vmfleet-tools,security_model=none,readonly=on",
                          f"local,path={tmp_path / 'mirror'},mount_tag=fleetsim-mirror,security_model=none,readonly=on"]
    assert (fleet_mod.TOOLS_DIR / "vmfleet" / "gpuboot.py").is_file()
    assert set(fakehw.list_profiles()) >= {"gcp_b200"}


def test_gpu_guest_reports_its_hardware_or_the_units_log(tmp_path, monkeypatch):
    state = {"fleet": "g", "nodes": {"b-1": {"seq": 1, "ssh_port": 2222, "pid": 1}}, "image": "x", "gpu_profile": "gcp_b200"}
    fleet = _fleet(tmp_path, monkeypatch, state)
    out = {"stdout": json.dumps({"profile": "gcp_b200", "index": 1, "nvidia_loaded": True,
                                 "rdma_devices": ["rocep145s0", "rocep146s0"]})}
    monkeypatch.setattr(fleet_mod, "run", lambda argv, timeout, check=True: fleet_mod.subprocess.CompletedProcess(
        argv, 0, out["stdout"], ""))
    fleet._wait_gpu("b-1")
    out["stdout"] = "vmfleet-gpu: vmfleet.gpu='x' is invalid: expected PROFILE:INDEX"
    with pytest.raises(VmError, match="guest b-1: no simulated GPU hardware .vmfleet-gpu.service.: vmfleet-gpu: vmfleet.gpu='x'"):
        fleet._wait_gpu("b-1")


def _qmp_server(path, answers):
    """A QMP server on a Unix socket answering one client: greeting, then one answer a command (events first)."""
    import socket
    import threading

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    got = []

    def serve():
        conn, dummy = server.accept()
        with conn, conn.makefile("rwb") as stream:
            stream.write(b'{"QMP": {"version": {}, "capabilities": []}}\n')
            stream.flush()
            for answer in answers:
                line = stream.readline()
                if not line:
                    break
                got.append(json.loads(line)["execute"])
                stream.write(answer.encode() + b"\n")
                stream.flush()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return got, thread


def test_qmp_command_negotiates_then_sends_skipping_events(tmp_path):
    answers = ['{"return": {}}', '{"event": "POWERDOWN", "timestamp": {}}\n{"return": {}}']
    got, thread = _qmp_server(tmp_path / "q.sock", answers)
    assert fleet_mod.qmp_command(tmp_path / "q.sock", "system_powerdown") == {"return": {}}
    thread.join(10)
    assert got == ["qmp_capabilities", "system_powerdown"]


def test_qmp_errors_name_the_command_and_socket(tmp_path):
    got, thread = _qmp_server(tmp_path / "q.sock", ['{"return": {}}', '{"error": {"class": "GenericError", "desc": "no"}}'])
    with pytest.raises(VmError, match=r"QMP system_powerdown at .*q.sock: \{'class': 'GenericError', 'desc': 'no'\}"):
        fleet_mod.qmp_command(tmp_path / "q.sock", "system_powerdown")
    thread.join(10)
    with pytest.raises(VmError, match=r"QMP system_powerdown at .*gone.sock failed: "):
        fleet_mod.qmp_command(tmp_path / "gone.sock", "system_powerdown", timeout=1)


def test_capture_presses_the_power_button_when_qemu_has_a_qmp_socket(tmp_path, monkeypatch):
    state = {"fleet": "g", "image": str(tmp_path / "image-x"), "nodes": {"b-1": {"seq": 1, "ssh_port": 2, "pid": 4242}}}
    (tmp_path / "image-x").mkdir()
    fleet = _fleet(tmp_path, monkeypatch, state)
    (fleet.dir / "b-1").mkdir()
    (fleet.dir / "b-1" / "overlay.qcow2").write_bytes(b"layer")
    (fleet.dir / "b-1" / "qmp.sock").write_bytes(b"")
    running = {"up": True}
    pressed = []

    def fake_qmp(path, command):
        pressed.append((path, command))
        running["up"] = False
        return {"return": {}}

    def fake_run(argv, timeout, check=True, **kw):
        assert argv[0] != "ssh", "a sealed guest takes no SSH connection: the power-off must not need one"
        if argv[0] == "cp":
            fleet_mod.shutil.copyfile(argv[-2], argv[-1])
        return fleet_mod.subprocess.CompletedProcess(argv, 0, "{}" if argv[0] == "qemu-img" else "", "")

    monkeypatch.setattr(fleet_mod, "qmp_command", fake_qmp)
    monkeypatch.setattr(fleet_mod, "run", fake_run)
    monkeypatch.setattr(fleet_mod, "_alive", lambda pid, needle: running["up"] and pid == 4242)
    fleet.capture("b-1", "golden")
    assert pressed == [(fleet.dir / "b-1" / "qmp.sock", "system_powerdown")]
    assert (fleet.dir / "images" / "golden" / "disk.qcow2").read_bytes() == b"layer"
