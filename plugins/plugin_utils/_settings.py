# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of play-level and role values (batch sizes, percentages, counts, timeouts, profiles, HCA mappings, GID
indexes, environment variables, releases, paths, URLs, name lists, downloads) before any host runs: every value
judged by its form, every refusal naming the variable, the value and the form expected. Pure logic; yes/no values
read as the roles' ``| bool`` reads them (ansible's ``boolean``).

A download (form ``source``) is judged in one place for every role that fetches one: a tarball needs its checksum
or a local ``file:`` URL, a git source a pinned commit (the commit is the checksum of a git source; tags, branches
and pull-request refs move), an APT repository a pinned key or a local one; ``<name>_allow_unverified`` accepts it
as it is. The refusal names the role's own variables (``<name>_src_checksum``, ``<name>_apt_keyring_checksum``).
"""

from __future__ import annotations

import re

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.deepep.plugins.module_utils._hca_mapping import HcaMappingError, parse_hca_mapping
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import SCOPES
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError, select_thresholds

__all__ = ["ARGUMENT_SPEC", "FORMS", "SettingError", "check_setting", "check_settings", "judge"]

_DIGITS = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"([0-9]+(?:\.[0-9]+)?)%")
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_PIP_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?")
_URL = re.compile(r"(https?|file)://.+", re.IGNORECASE)
_REMOTE = re.compile(r"(https?|ftp)://", re.IGNORECASE)
_COMMIT = re.compile(r"[0-9a-f]{40}")

FORMS = {
    "serial": "a positive whole number of hosts, a percentage string such as '25%' (above 0, at most 100), or a "
              "non-empty list of those",
    "percentage": "a whole number from 0 to 100",
    "count": "a whole number, 0 or more",
    "positive": "a whole number, 1 or more",
    "seconds": "a whole number of seconds, 1 or more",
    "choice": "one of the choices given",
    "profile": "a profile name the gates know (the thresholds table's keys, with a scope also the collection's "
               "GPU families), a name with one of them as a '_'/'-' token (gcp_b200 -> b200) or a profile whose "
               "declared GPU family (gpufleet_gpu_family) they know, or 'default' for the loose default gate",
    "hca_mapping": "'auto', '' (none) or gpu:hca:port[,gpu:hca:port...] with each GPU once, e.g. 0:mlx5_0:1,1:mlx5_1:1",
    "gid_index": "'auto', '' (none) or a whole number from 0 to 255",
    "env": "a mapping of shell variable names (letters, digits, _; not starting with a digit) to one-line values",
    "release": "a release N.N.N (2.30.7)",
    "pip_release": "a release N.N.N, optionally with .postN (0.5.8, 0.5.8.post1)",
    "path": "an absolute path",
    "url": "an http, https or file URL",
    "names": "a list of names (strings), possibly empty",
    "source": "a download described as {type: tarball, url, checksum}, {type: git, repo, ref, commit} or {type: apt, "
              "repo_url, keyring_url, keyring_checksum, trusted}, with allow_unverified, title and hint optional",
}


class SettingError(ValueError):
    """A value is not of its form; the message names the variable, the value and the form."""


def _fail(name, value, form, why=None):
    what = (": " + why) if why else " is not of its form"
    raise SettingError("%s=%r%s; expected %s" % (name, value, what, FORMS[form]))


def _whole(value):
    """An int from an int (never bool) or a string of digits (extra vars arrive as strings); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return None


def _number(name, value, form, low, high=None):
    number = _whole(value)
    if number is None:
        _fail(name, value, form, "not a whole number")
    if number < low or (high is not None and number > high):
        _fail(name, value, form, "out of range")
    return number


def _serial_item(name, value):
    if isinstance(value, str) and _PERCENT.fullmatch(value):
        share = float(_PERCENT.fullmatch(value).group(1))
        if not 0 < share <= 100:
            _fail(name, value, "serial", "a percentage above 0 and at most 100 is needed")
        return value
    return _number(name, value, "serial", 1)


def _text(value):
    return "" if value is None else str(value)


def _unverified(name, source):
    """Why ``source`` (form ``source``) would be fetched with nothing to verify it, or '' when it is verified."""
    kind, title = source["type"], _text(source.get("title")) or name
    after = ", or set %s_allow_unverified: true to accept it unverified." % name
    if kind == "apt":
        repo, key = _text(source.get("repo_url")), _text(source.get("keyring_url"))
        if boolean(source.get("trusted"), strict=False):
            if not _REMOTE.match(repo):
                return ""
            why = "%s_apt_trusted marks %s [trusted=yes], a repository over the network." % (name, repo)
        elif _REMOTE.match(key) and not _text(source.get("keyring_checksum")):
            why = "The key %s is fetched over the network and %s_apt_keyring_checksum is empty." % (key, name)
        else:
            return ""
        return ("%s Nothing would verify the packages: set %s_apt_keyring_checksum: sha256:<hex> (sha256sum of the "
                "key file), or point the repository and key at a local file: mirror%s" % (why, name, after))
    repo, ref = _text(source.get("repo")), _text(source.get("ref"))
    git_fix = "%s_src_git_commit: <the full commit id you reviewed> (git ls-remote %s %s)%s" % (
        name, repo, ref, _text(source.get("hint")))
    if kind == "git":
        if _text(source.get("commit")) or _COMMIT.fullmatch(ref):
            return ""
        return ("%s of %s is a moving ref and %s_src_git_commit is empty, so nothing would verify the %s source. Set "
                "%s%s" % (ref, repo, name, title, git_fix, after))
    url = _text(source.get("url"))
    if _text(source.get("checksum")) or url.lower().startswith("file:"):
        return ""
    return ("%s_src_url %s is fetched over the network and %s_src_checksum is empty, so nothing would verify the %s "
            "source. Set %s_src_checksum: sha256:<hex> (sha256sum of the tarball) or sha256:<URL of its .sha256 "
            "file>%s, point %s_src_url at a local file: mirror%s"
            % (name, url, name, title, name, (", or with a git source " + git_fix) if repo else "", name, after))


def _source(name, value):
    if not isinstance(value, dict) or value.get("type") not in ("tarball", "git", "apt"):
        _fail(name, value, "source", "not a mapping whose type is tarball, git or apt")
    if not boolean(value.get("allow_unverified"), strict=False):
        why = _unverified(name, value)
        if why:
            raise SettingError(why)
    return value


def _matching(name, value, form, pattern):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not pattern.fullmatch(str(value)):
        _fail(name, value, form)
    return str(value)


def check_setting(name, value, form, choices=None, table=None, table_name=None, family=None, scope=None):
    """The value, normalised (numbers as int; a profile as the table key it takes), or SettingError. ``table_name``
    is the variable that holds ``table``, named in a profile's refusal; ``family`` the GPU family the profile
    declares (gpufleet_gpu_family, empty for none), which picks its entry after the exact name; ``scope``
    (intranode, internode) makes ``table`` the site's overrides of the collection's gates of that scope."""
    if form not in FORMS:
        raise SettingError("setting %s: form %r is unknown; expected one of %s" % (name, form, ", ".join(sorted(FORMS))))
    if form == "serial":
        if isinstance(value, (list, tuple)):
            if not value:
                _fail(name, value, form, "an empty list runs no batch")
            return [_serial_item(name, item) for item in value]
        return _serial_item(name, value)
    if form == "percentage":
        return _number(name, value, form, 0, 100)
    if form == "count":
        return _number(name, value, form, 0)
    if form in ("positive", "seconds"):
        return _number(name, value, form, 1)
    if form == "choice":
        if not choices:
            raise SettingError("setting %s: form choice needs choices" % name)
        if value not in choices:
            raise SettingError("%s=%r is not a known choice; expected one of %s"
                               % (name, value, ", ".join(repr(c) for c in choices)))
        return value
    if form == "profile":
        if value is not None and not isinstance(value, str):
            _fail(name, value, form, "not a string")
        try:
            return select_thresholds(table, value, table_name=table_name, family=family, scope=scope)["matched"]
        except VerifyInputError as exc:
            raise SettingError("%s: %s" % (name, exc))
    if form == "hca_mapping":
        if value in ("auto", "", None):
            return value
        try:
            parse_hca_mapping(value)
        except HcaMappingError as exc:
            raise SettingError("%s: %s" % (name, exc))
        return value.strip()
    if form == "gid_index":
        if value in ("auto", "", None):
            return value
        return _number(name, value, form, 0, 255)
    if form in ("release", "pip_release", "url"):
        return _matching(name, value, form, {"release": _RELEASE, "pip_release": _PIP_RELEASE, "url": _URL}[form])
    if form == "path":
        if not isinstance(value, str) or not value.startswith("/"):
            _fail(name, value, form)
        return value
    if form == "names":
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            _fail(name, value, form)
        return value
    if form == "source":
        return _source(name, value)
    # env
    if not isinstance(value, dict):
        _fail(name, value, form, "not a mapping")
    for key, item in value.items():
        if not isinstance(key, str) or not _SHELL_NAME.fullmatch(key):
            _fail(name, value, form, "%r is not a shell variable name" % (key,))
        if isinstance(item, (dict, list)) or item is None:
            _fail(name, value, form, "the value of %s is %r, not a string or number" % (key, item))
        text = str(item)
        if "\n" in text or "\r" in text or "\0" in text:
            _fail(name, value, form, "the value of %s holds a line break or NUL" % key)
    return value


def check_settings(settings):
    """Check a list of {name, value, form[, choices][, table][, table_name][, family][, scope]}; returns (checked
    {name: value}, errors [str])."""
    if not isinstance(settings, list):
        return {}, ["settings must be a list of {name, value, form}, got %r" % (settings,)]
    checked, errors = {}, []
    for pos, item in enumerate(settings):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "form" not in item:
            errors.append("settings[%d]=%r: expected {name, value, form}" % (pos, item))
            continue
        try:
            checked[item["name"]] = check_setting(item["name"], item.get("value"), item["form"],
                                                  choices=item.get("choices"), table=item.get("table"),
                                                  table_name=item.get("table_name"), family=item.get("family"),
                                                  scope=item.get("scope"))
        except SettingError as exc:
            errors.append(str(exc))
    return checked, errors


# The options of play_settings (modules/play_settings.py documents them), validated by its action.
ARGUMENT_SPEC = dict(
    settings=dict(type="list", elements="dict", required=True, options=dict(
        name=dict(type="str", required=True),
        value=dict(type="raw"),
        form=dict(type="str", required=True, choices=sorted(FORMS)),
        choices=dict(type="list", elements="raw"),
        table=dict(type="dict"),
        table_name=dict(type="str"),
        family=dict(type="str"),
        scope=dict(type="str", choices=list(SCOPES)),
    )),
)


def judge(settings):
    """The module's result for ``settings``: ``{changed, settings}``, or ``{failed, msg, errors}``."""
    checked, errors = check_settings(settings)
    if errors:
        return dict(failed=True, changed=False, errors=errors,
                    msg="%d setting%s refused before any host runs: %s"
                    % (len(errors), "" if len(errors) == 1 else "s", "; ".join(errors)))
    return dict(changed=False, settings=checked)
