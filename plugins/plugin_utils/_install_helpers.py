# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure decisions of the install roles (pytorch, image, gdrcopy, nvidia_peermapping, build_once), behind the filters
of ``plugins/filter/install_helpers.py``. Each raises InstallInputError naming the bad value and the form expected."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE

__all__ = ["InstallInputError", "pip_args", "torch_install_gaps", "gcloud_image_argv", "nvidia_src_dir", "affixed",
           "play_records"]

_PLAIN_REQUIREMENT = re.compile(r"^[A-Za-z0-9._-]+\Z")
_LOCAL_VERSION = re.compile(r"\+.*$")


class InstallInputError(ValueError):
    """A filter input of the wrong form."""


def _str(name, value):
    if not isinstance(value, str):
        raise InstallInputError("%s must be a string, got %r" % (name, value))
    return value


def _strs(name, value):
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise InstallInputError("%s must be a list of strings, got %r" % (name, value))
    return [_str("an item of " + name, item) for item in value]


def _bool(name, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        norm = value.lower().strip() if isinstance(value, str) else value
        if norm in BOOLEANS_TRUE:
            return True
        if norm in BOOLEANS_FALSE:
            return False
    raise InstallInputError("%s must be a boolean (true/false, yes/no), got %r" % (name, value))


def _dict(name, value):
    if not isinstance(value, dict):
        raise InstallInputError("%s must be a dict, got %r" % (name, value))
    return value


def pip_args(index_url, extra_index_urls, find_links, no_index, break_system_packages, extra_args):
    """pip's options for the pytorch role, in its order: index, extra indexes, find-links, --no-index,
    --break-system-packages, the user's extra arguments, then --disable-pip-version-check --no-input."""
    index_url = _str("index_url", index_url)
    extra_index_urls = _strs("extra_index_urls", extra_index_urls)
    find_links = _str("find_links", find_links)
    no_index = _bool("no_index", no_index)
    break_system_packages = _bool("break_system_packages", break_system_packages)
    extra_args = _str("extra_args", extra_args)
    args = ["--index-url " + index_url] if index_url and not no_index else []
    args += ["--extra-index-url " + url for url in extra_index_urls]
    args += ["--find-links " + find_links] if find_links else []
    args += ["--no-index"] if no_index else []
    args += ["--break-system-packages"] if break_system_packages else []
    args += [extra_args] if extra_args else []
    return args + ["--disable-pip-version-check", "--no-input"]


def torch_install_gaps(installed, torch_version, extra_packages):
    """What the pytorch role's probe (``{torch_version, packages: {name: version or None}}``) lacks against the wanted
    torch: ``{version}`` (the installed one without its +local part, '' when none), ``missing`` (packages without a
    version, in the probe's order) and ``pip_needed``: another torch, a missing package, or an extra requirement
    with a version specifier (those always go through pip)."""
    installed = _dict("the installed torch (the probe's result)", installed)
    if isinstance(torch_version, bool) or not isinstance(torch_version, (str, int, float)):
        raise InstallInputError("torch_version must be a version string such as 2.9.1, got %r" % (torch_version,))
    extra_packages = _strs("extra_packages", extra_packages)
    have = installed.get("torch_version") or ""
    have = _LOCAL_VERSION.sub("", _str("torch_version of the probe", have))
    packages = _dict("packages of the probe", installed.get("packages") or {})
    missing = [name for name, version in packages.items() if version is None]
    specified = [req for req in extra_packages if not _PLAIN_REQUIREMENT.match(req)]
    return {"version": have, "missing": missing,
            "pip_needed": have != str(torch_version) or bool(missing) or bool(specified)}


_GCP_KEYS = ("gcloud", "project", "zone", "instance", "disk", "image_name", "image_family", "storage_location",
             "template_name", "machine_type", "boot_disk_size", "network_interfaces", "reservation", "mig_name",
             "mig_size")
GCP_STEPS = ("image_create", "template_create", "mig_set_template", "mig_resize")


def gcloud_image_argv(settings, step):
    """The gcloud argv of one step of the image role's GCP hand-off, from its settings (image_gcp_* without the
    prefix)."""
    settings = _dict("the GCP settings", settings)
    absent = [key for key in _GCP_KEYS if key not in settings]
    if absent:
        raise InstallInputError("the GCP settings lack %s (keys wanted: %s)" % (", ".join(absent), ", ".join(_GCP_KEYS)))
    s = settings
    scope = ["--zone", s["zone"], "--project", s["project"]]
    if step == "image_create":
        return ([s["gcloud"], "compute", "images", "create", s["image_name"],
                 "--source-disk", s["disk"] or s["instance"], "--source-disk-zone", s["zone"],
                 "--family", s["image_family"], "--project", s["project"]]
                + (["--storage-location", s["storage_location"]] if len(s["storage_location"]) > 0 else []))
    if step == "template_create":
        return ([s["gcloud"], "compute", "instance-templates", "create", s["template_name"],
                 "--project", s["project"], "--machine-type", s["machine_type"],
                 "--image", s["image_name"], "--image-project", s["project"],
                 "--boot-disk-size", s["boot_disk_size"], "--maintenance-policy", "TERMINATE"]
                + ["--network-interface=" + nic for nic in _strs("network_interfaces", s["network_interfaces"])]
                + (["--reservation-affinity", "specific", "--reservation", s["reservation"]]
                   if len(s["reservation"]) > 0 else []))
    if step == "mig_set_template":
        return [s["gcloud"], "compute", "instance-groups", "managed", "set-instance-template", s["mig_name"],
                "--template", s["template_name"]] + scope
    if step == "mig_resize":
        return [s["gcloud"], "compute", "instance-groups", "managed", "resize", s["mig_name"],
                "--size", str(s["mig_size"])] + scope
    raise InstallInputError("step must be one of %s, got %r" % (", ".join(GCP_STEPS), step))


def nvidia_src_dir(dirs, driver_version):
    """Of the directories holding nv-p2p.h (sorted), the first whose path names ``driver_version`` (not as part of a
    longer version), else the first, else ''."""
    dirs = _strs("dirs", dirs)
    driver_version = _str("driver_version", driver_version)
    named = re.compile("[^0-9.]" + re.escape(driver_version) + "([^0-9.]|$)")
    return ([d for d in dirs if named.search(d)] + dirs + [""])[0]


def affixed(items, prefix="", suffix=""):
    """Each item with ``prefix`` before it and ``suffix`` after it."""
    items = _strs("items", items)
    prefix, suffix = _str("prefix", prefix), _str("suffix", suffix)
    return [prefix + item + suffix for item in items]


def play_records(hostvars, hosts, kind):
    """Each host's ``build_once_record`` (in ``hosts`` order) where its kind is ``kind``, else {}."""
    if not isinstance(hostvars, Mapping):
        raise InstallInputError("hostvars must be a mapping of inventory hostnames to their vars, got %r" % (hostvars,))
    hosts = _strs("hosts", hosts)
    kind = _str("kind", kind)
    out = []
    for host in hosts:
        if host not in hostvars:
            raise InstallInputError("hostvars has no host %r (hosts must be inventory hostnames)" % (host,))
        host_vars = hostvars[host]
        record = host_vars.get("build_once_record") if isinstance(host_vars, Mapping) else None
        record = record if isinstance(record, Mapping) else {}
        out.append(record if record.get("kind", "") == kind else {})
    return out
