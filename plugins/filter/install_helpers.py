# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of the install roles: pip's arguments and what pip has to do (pytorch), the gcloud commands of the GCP
hand-off (image), the NVIDIA kernel source to build gdrdrv against (gdrcopy), prefixed and suffixed lists
(nvidia_peermapping, gdrcopy) and the batch's build records (build_once).

Each filter is documented in ``<filter name>.yml`` beside this file. The logic lives in
``plugins/plugin_utils/_install_helpers.py``; the filters are pure, so check mode decides as a real run does.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _install_helpers as _h


def _call(name, func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except _h.InstallInputError as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc)) from exc


def pip_args(index_url, extra_index_urls, find_links, no_index, break_system_packages, extra_args):
    """The pytorch role's pip options."""
    return _call("pip_args", _h.pip_args, index_url, extra_index_urls, find_links, no_index, break_system_packages,
                 extra_args)


def torch_install_gaps(installed, torch_version, extra_packages):
    """{version, missing, pip_needed} of the pytorch role's probe against the wanted torch."""
    return _call("torch_install_gaps", _h.torch_install_gaps, installed, torch_version, extra_packages)


def gcloud_image_argv(settings, step):
    """The gcloud argv of one step of the image role's GCP hand-off."""
    return _call("gcloud_image_argv", _h.gcloud_image_argv, settings, step)


def nvidia_src_dir(dirs, driver_version):
    """The NVIDIA kernel source directory of the running driver's version, else the first found, else ''."""
    return _call("nvidia_src_dir", _h.nvidia_src_dir, dirs, driver_version)


def affixed(items, prefix="", suffix=""):
    """Each item between ``prefix`` and ``suffix``."""
    return _call("affixed", _h.affixed, items, prefix=prefix, suffix=suffix)


def play_records(hostvars, hosts, kind):
    """The hosts' build_once_record of one kind ({} for the others)."""
    return _call("play_records", _h.play_records, hostvars, hosts, kind)


class FilterModule:
    """Install-role helpers."""

    def filters(self):
        return guard_filters({
            "pip_args": pip_args,
            "torch_install_gaps": torch_install_gaps,
            "gcloud_image_argv": gcloud_image_argv,
            "nvidia_src_dir": nvidia_src_dir,
            "affixed": affixed,
            "play_records": play_records,
        })
