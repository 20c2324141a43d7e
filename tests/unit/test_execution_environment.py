# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's dependencies as an Execution Environment reads them: meta/execution-environment.yml,
requirements.txt and bindep.txt ship in the collection tarball; ``ansible-builder create`` turns
docs/ee/execution-environment.yml (schema 3) into a build context holding that tarball; ``ansible-builder
introspect --sanitize`` over the installed tarball lists the collection's Python and system dependencies; bindep's
profiles keep the nodes' packages and the build-only ones out of the EE."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from bindep.depends import Depends

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
TARBALL_NAME = "%s-%s-%s.tar.gz" % (GALAXY["namespace"], GALAXY["name"], GALAXY["version"])
FQCN = "%s.%s" % (GALAXY["namespace"], GALAXY["name"])
LIMIT = 300  # seconds any one tool here may take

# What the controller-side code imports beyond the standard library and ansible-core (which brings Jinja2 and
# PyYAML), and where.
PYTHON_DEPS = {"jmespath": "plugins/plugin_utils/_audit/expr.py", "netaddr": "plugins/filter/verify_helpers.py"}
# bindep: (platform profiles, asked profile) -> the packages that must be listed, and those that must not be.
CONTROLLER = {"dpkg": {"openssh-client", "rsync"}, "rpm": {"openssh-clients", "rsync"}}
COMPILE = {"dpkg": {"gcc", "python3-dev"}, "rpm": {"gcc", "python3-devel"}}
NODE = {"dpkg": {"python3", "python3-pip", "openssh-server", "kmod", "pciutils", "git", "build-essential", "cmake",
                 "ninja-build", "libibverbs-dev", "librdmacm-dev"},
        "rpm": {"python3", "python3-pip", "openssh-server", "kmod", "pciutils", "git", "gcc-c++", "make", "cmake",
                "ninja-build", "rdma-core-devel"}}
PLATFORMS = {"dpkg": ["platform:dpkg", "platform:debian", "platform:ubuntu"],
             "rpm": ["platform:rpm", "platform:redhat", "platform:centos"]}


def env(**extra) -> dict:
    out = dict(os.environ, PATH="%s:%s" % (BIN, os.environ.get("PATH", "/usr/bin")), ANSIBLE_NOCOLOR="1")
    out.update(extra)
    return out


def run(argv: list, cwd: Path, **extra) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env(**extra), text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False, timeout=LIMIT)
    assert proc.returncode == 0, "%s: rc %d\n%s" % (" ".join(map(str, argv)), proc.returncode, proc.stdout)
    return proc


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([BIN / "ansible-galaxy", "collection", "build", "--output-path", out, REPO], REPO)
    path = out / TARBALL_NAME
    assert path.is_file(), sorted(p.name for p in out.iterdir())
    return path


@pytest.fixture(scope="module")
def installed(tarball, tmp_path_factory) -> Path:
    """The tarball installed on its own (not the checkout's symlink), as an EE's galaxy stage installs it."""
    root = tmp_path_factory.mktemp("collections")
    run([BIN / "ansible-galaxy", "collection", "install", "--offline", "--no-deps", "--force", "-p", root, tarball],
        root, ANSIBLE_COLLECTIONS_PATH=str(root))
    assert (root / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"] / "galaxy.yml").exists() or \
        (root / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"] / "MANIFEST.json").exists()
    return root


def meta() -> dict:
    return yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())


def test_meta_names_the_collections_requirement_files():
    data = meta()
    assert data["version"] == 1
    assert data["dependencies"] == {"python": "requirements.txt", "system": "bindep.txt"}


@pytest.mark.parametrize("path", ["meta/execution-environment.yml", "requirements.txt", "bindep.txt"])
def test_the_declarations_ship_in_the_collection_tarball(tarball, path):
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert path in names, "%s is left out of %s (galaxy.yml build_ignore?)" % (path, tarball.name)
    ignored = [pattern for pattern in GALAXY.get("build_ignore", []) if path == pattern or path.startswith(pattern + "/")]
    assert not ignored


def test_the_tarball_holds_only_what_the_checkout_tracks(tarball):
    """No local tool state in the tarball: the galaxy-importer's virtualenv (.venv-importer, made by the lint stage
    while the unit stage builds this tarball) once rode along, 105 MB, and a build during its install failed the
    install with a checksum mismatch. Every top-level entry of the tarball is one git tracks."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, text=True, stdout=subprocess.PIPE, check=True,
                             timeout=LIMIT).stdout.split()
    tops = {name.split("/", 1)[0] for name in tracked} | {"MANIFEST.json", "FILES.json"}
    with tarfile.open(tarball) as tar:
        members = {member.name.split("/", 1)[0] for member in tar.getmembers()}
    assert sorted(members - tops) == []


def _requirements() -> dict:
    out = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = re.split(r"[<>=!~;\[ ]", line, 1)[0].lower()
            out[name] = line
    return out


@pytest.mark.parametrize("name,importer", sorted(PYTHON_DEPS.items()))
def test_requirements_name_every_third_party_import_of_the_controller(name, importer):
    source = (REPO / importer).read_text()
    imported = {node.names[0].name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Import)} | {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
                                                    if isinstance(node, ast.ImportFrom) and node.module}
    assert name in imported, "%s no longer imports %s: update PYTHON_DEPS and requirements.txt" % (importer, name)
    assert name in _requirements(), "requirements.txt misses %s (imported by %s)" % (name, importer)
    assert re.search(r">=\s*\d", _requirements()[name]), "%s: a lower bound, not a pin" % _requirements()[name]


def test_requirements_hold_no_test_tool():
    dev = {re.split(r"[<>=!~;\[ ]", line, 1)[0].lower()
           for line in (REPO / "requirements-dev.txt").read_text().splitlines() if line.strip() and line[0] != "#"}
    runtime = set(_requirements())
    assert runtime == set(PYTHON_DEPS), "requirements.txt: %s (expected the imports only: %s)" % (
        sorted(runtime), sorted(PYTHON_DEPS))
    assert not (runtime & (dev - set(PYTHON_DEPS)))


@pytest.mark.parametrize("family", sorted(PLATFORMS))
@pytest.mark.parametrize("profile,expected,absent", [
    ("default", CONTROLLER, [COMPILE, NODE]),
    ("compile", {"dpkg": CONTROLLER["dpkg"] | COMPILE["dpkg"], "rpm": CONTROLLER["rpm"] | COMPILE["rpm"]}, [NODE]),
    ("node", {"dpkg": CONTROLLER["dpkg"] | NODE["dpkg"], "rpm": CONTROLLER["rpm"] | NODE["rpm"]}, [COMPILE]),
])
def test_bindep_profiles(family, profile, expected, absent):
    deps = Depends((REPO / "bindep.txt").read_text())
    assert set(deps.profiles()) == {"compile", "node"}
    active = {rule[0] for rule in deps.active_rules(PLATFORMS[family] + [profile])}
    assert active == expected[family], (family, profile, sorted(active))
    for other in absent:
        # A package of another profile only shows where this profile lists it too (gcc: compile and build-essential).
        assert not (other[family] - expected[family]) & active


def test_ee_definition_is_schema_3_and_installs_the_tarball():
    ee = yaml.safe_load((REPO / "docs" / "ee" / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert ee["dependencies"]["galaxy"] == "requirements.yml"
    assert ee["dependencies"]["ansible_core"]["package_pip"].startswith("ansible-core==")
    dev = (REPO / "requirements-dev.txt").read_text()
    for key in ("ansible_core", "ansible_runner"):
        assert ee["dependencies"][key]["package_pip"] in dev.split(), "%s: not the version the tests use" % key
    wanted = yaml.safe_load((REPO / "docs" / "ee" / "requirements.yml").read_text())["collections"]
    assert wanted == [{"name": "collections/%s" % TARBALL_NAME, "type": "file"}], \
        "docs/ee/requirements.yml does not name this version's tarball (%s)" % TARBALL_NAME


def test_ansible_builder_create_writes_a_context_holding_the_collection(tarball, tmp_path):
    for name in ("execution-environment.yml", "requirements.yml"):
        (tmp_path / name).write_text((REPO / "docs" / "ee" / name).read_text())
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / TARBALL_NAME).write_bytes(tarball.read_bytes())
    out = run([BIN / "ansible-builder", "create", "-f", "execution-environment.yml", "-c", "context",
               "--output-filename", "Containerfile"], tmp_path)
    assert "Complete! The build context can be found at" in out.stdout
    context = tmp_path / "context"
    copied = context / "_build" / "collections" / TARBALL_NAME
    assert copied.read_bytes() == tarball.read_bytes()
    with tarfile.open(copied) as tar:
        assert {"meta/execution-environment.yml", "requirements.txt", "bindep.txt"} <= set(tar.getnames())
    assert yaml.safe_load((context / "_build" / "requirements.yml").read_text())["collections"][0]["name"] == \
        "collections/" + TARBALL_NAME
    containerfile = (context / "Containerfile").read_text()
    assert "ansible-galaxy collection install" in containerfile and "-r requirements.yml" in containerfile
    assert "introspect.py introspect" in containerfile  # the collection's requirements are read at build time
    assert "ansible-core==2.19.14" in containerfile and "ansible-runner==2.4.3" in containerfile


def test_ansible_builder_introspect_lists_the_collections_dependencies(installed):
    out = run([BIN / "ansible-builder", "introspect", "--sanitize", installed], installed).stdout
    data = yaml.safe_load(out.split("\n", 1)[1])
    tag = "  # from collection %s" % FQCN
    python = {line.split("  #")[0]: line for line in data["python"]}
    assert set(python) == {_requirements()[name] for name in PYTHON_DEPS}
    assert all(line.endswith(tag) for line in data["python"] + data["system"])
    system = {line.split("  #")[0] for line in data["system"]}
    assert "openssh-client [platform:dpkg]" in system and "openssh-clients [platform:rpm]" in system
    assert "cmake [node]" in system
