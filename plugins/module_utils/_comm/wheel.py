# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A wheel installed into site-packages as one transaction that a failed check or a kill rolls back.

Standard library only, Python 3.8+ (this file runs on the managed nodes).

1. ``pip install --no-deps --target <site>/.gpufleet-<name>-stage-<pid>`` unpacks the wheel beside the install:
   nothing the interpreter imports changes, so a kill here leaves the old install as it was.
2. A journal (``<site>/.gpufleet-<name>-install.json``) names the old top-level entries of the project (from its
   ``RECORD``) and the new ones, then the old entries are renamed into a backup directory and the new ones renamed
   in (renames within one filesystem).
3. The caller checks the import; ``commit`` removes the journal and the backup, ``rollback`` renames the new entries
   out and the old ones back.

A run killed between 2 and 3 leaves the journal; the next run's ``recover`` rolls back before it looks at the
install, so the previous install is what it finds.
"""

from __future__ import annotations

import glob
import os
import re
import shutil

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_json_dict, read_text, write_json_file

__all__ = ["WheelInstall", "dist_entries", "journal_path", "recover", "stale_stages"]


def _token(name):
    return re.sub(r"[^A-Za-z0-9]+", "_", name).lower()


def journal_path(site, project):
    return os.path.join(site, ".gpufleet-%s-install.json" % _token(project))


def _stage_re(project):
    return re.compile(r"^\.gpufleet-%s-(stage|backup)-[0-9]+$" % re.escape(_token(project)))


def stale_stages(site, project):
    """Stage and backup directories that killed runs left in ``site`` (none while a journal names them)."""
    journal = read_json_dict(journal_path(site, project)) or {}
    keep = set(os.path.basename(str(journal.get(k) or "")) for k in ("stage", "backup"))
    pattern = _stage_re(project)
    try:
        names = sorted(os.listdir(site))
    except (IOError, OSError):
        return []
    return [os.path.join(site, n) for n in names if pattern.match(n) and n not in keep
            and os.path.isdir(os.path.join(site, n)) and not os.path.islink(os.path.join(site, n))]


def dist_entries(site, project):
    """The top-level names in ``site`` that the installed distributions of ``project`` own (from their ``RECORD``,
    the ``.dist-info`` directory included)."""
    names = set()
    pattern = "%s-*.dist-info" % _token(project)
    for info in sorted(glob.glob(os.path.join(site, pattern))):
        names.add(os.path.basename(info))
        for line in (read_text(os.path.join(info, "RECORD")) or "").splitlines():
            path = line.split(",", 1)[0].strip().strip('"')
            if not path or path.startswith("/") or path.startswith(".."):
                continue
            top = path.replace("\\", "/").split("/", 1)[0]
            if top and top not in (".", "..") and not top.startswith(".") and top != "__pycache__":
                names.add(top)
    return sorted(n for n in names if os.path.lexists(os.path.join(site, n)))


def _rename_all(pairs):
    for source, target in pairs:
        if os.path.lexists(source) and not os.path.lexists(target):
            os.rename(source, target)


def _rollback(journal):
    """New entries out (back into the stage), old ones back from the backup; idempotent, so a rollback that was
    itself killed completes on the next try."""
    site, stage, backup = journal["site"], journal["stage"], journal["backup"]
    if not os.path.isdir(stage):
        os.makedirs(stage)
    # A new entry is in site only once its stage copy has moved; one still in the stage was never moved in.
    _rename_all((os.path.join(site, n), os.path.join(stage, n)) for n in journal["new"]
                if not os.path.lexists(os.path.join(stage, n)))
    _rename_all((os.path.join(backup, n), os.path.join(site, n)) for n in journal["old"])


def _remove(*paths):
    for path in paths:
        if path and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)


def recover(site, project):
    """Roll back an install a killed run left half done; a sentence saying what was restored, or None."""
    path = journal_path(site, project)
    journal = read_json_dict(path)
    if journal is None:
        if os.path.lexists(path):
            os.unlink(path)  # unreadable: written by a run killed before any rename (the write is atomic)
        return None
    for field in ("site", "stage", "backup", "old", "new"):
        if field not in journal:
            raise OSError("install journal %s lacks %s; move it away after checking %s by hand" % (path, field, site))
    _rollback(journal)
    os.unlink(path)
    _remove(journal["stage"], journal["backup"])
    return "rolled back an interrupted install of %s in %s (restored: %s)" % (
        project, site, ", ".join(journal["old"]) or "nothing was installed before")


class WheelInstall(object):
    """One install of ``wheel`` for ``project`` into ``site`` by ``python`` (see the module's description).

    ``run`` is the runner of the build modules (``CommandLog.run``); ``env`` is added to pip's environment.
    """

    def __init__(self, run, python, site, project, wheel, env=None):
        self._run = run
        self.python = python
        self.site = site
        self.project = project
        self.wheel = wheel
        self.env = env or {}
        token = _token(project)
        self.stage = os.path.join(site, ".gpufleet-%s-stage-%d" % (token, os.getpid()))
        self.backup = os.path.join(site, ".gpufleet-%s-backup-%d" % (token, os.getpid()))
        self.journal = None
        self.new = []

    def stage_wheel(self):
        """pip unpacks the wheel into the stage; the live install is untouched. Raises StepFailed from the runner."""
        _remove(self.stage)
        os.makedirs(self.stage)
        self._run([self.python, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-index",
                   "--disable-pip-version-check", "--no-compile", "--target", self.stage, self.wheel], env=self.env)
        new = sorted(n for n in os.listdir(self.stage) if n not in ("bin", "__pycache__") and not n.startswith("."))
        if not any(n.endswith(".dist-info") for n in new):
            raise OSError("pip put no .dist-info into %s for %s" % (self.stage, self.wheel))
        self.new = new
        return new

    def swap(self, new):
        """Journal, old entries into the backup, new entries in."""
        old = dist_entries(self.site, self.project)
        # A file the new wheel brings that some other distribution owns is replaced too (and restored on rollback).
        old += [n for n in new if n not in old and os.path.lexists(os.path.join(self.site, n))]
        self.journal = {"site": self.site, "stage": self.stage, "backup": self.backup, "old": sorted(old),
                        "new": new, "wheel": self.wheel, "pid": os.getpid()}
        _remove(self.backup)
        os.makedirs(self.backup)
        write_json_file(journal_path(self.site, self.project), self.journal, tmp_prefix=".gpufleet-journal.")
        _rename_all((os.path.join(self.site, n), os.path.join(self.backup, n)) for n in self.journal["old"])
        _rename_all((os.path.join(self.stage, n), os.path.join(self.site, n)) for n in new)

    def commit(self):
        os.unlink(journal_path(self.site, self.project))
        _remove(self.stage, self.backup)

    def rollback(self):
        """Put the previous install back; the old entries it restored."""
        if self.journal is None:
            _remove(self.stage)
            return []
        _rollback(self.journal)
        os.unlink(journal_path(self.site, self.project))
        _remove(self.stage, self.backup)
        return self.journal["old"]

    def abandon(self):
        """Nothing was swapped (pip failed): remove the stage."""
        if self.journal is None:
            _remove(self.stage)
