#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: artifact_store
short_description: Look up, get and publish build artifacts in the fleet's artifact store (build once, distribute)
version_added: 0.2.0
description:
  - The artifact store holds one directory per build key, C(<store>/<kind>/<key>/), with the artifact's files and
    C(record.json) (kind, key, each file's sha256 and size in install order, the publishing host, the time and
    O(meta)). The build phases (NVSHMEM packed installs, DeepEP wheels, NCCL and GDRCopy builds, DeepGEMM caches)
    build a key on one host, publish it, and install it everywhere else from the store.
  - This is an action plugin. With O(mode=controller) the store is a directory of the controller; the plugin
    fetches published files from the node and copies artifacts to it. With O(mode=shared) the store is a path every
    node mounts (for example NFS) and the module runs on the node, which reads and writes the store itself.
  - V(put) publishes the files O(files) of O(src) as O(kind)/O(key). The key's directory appears by one rename of a
    complete directory assembled under C(<store>/.incoming/); C(<store>/.lock) (fcntl) serialises the rename, so two
    controllers or nodes publishing one key leave one artifact and one record - the first publishes
    (RV(published=true)), the second reuses what is there (RV(published=false)).
  - V(get) copies the key's files into O(dest) and verifies each file's size and sha256 against the record on the
    node, after the transfer and before anything is renamed into place. A truncated or altered artifact, or a record
    of the wrong shape or without a checksum, is refused with a message naming the file; nothing is installed then.
    Files already in O(dest) with the recorded checksum are left alone. A key the store lacks gives
    RV(found=false), not a failure (the caller decides).
  - V(lookup) only reads. In check mode V(lookup) runs, V(get) and V(put) report what they would do and write
    nothing.
  - V(describe) reads the files O(files) of O(src) (their sha256, size and mode) and writes nothing; the action
    plugin runs it on the node for a V(put) with O(mode=controller).
  - Links are never followed. V(put) refuses a file of O(files) that is a symbolic link (or not a regular file), and
    an O(src) that is a link or lies under one; V(get) and V(lookup) refuse a store entry whose kind or key directory
    is a link, or that holds a link, a file with several hard links or anything but regular files; V(get) refuses an
    O(dest) that is a link or lies under one. Files are opened with C(O_NOFOLLOW); every message names the path.
  - Modes. A published file keeps the permission bits of its source less group and world write, setuid, setgid and
    sticky (the source's mode C(& 0755)), so a C(0600) source stays C(0600) in the store, and V(get) installs each file
    with the stored file's mode, so a private file never becomes world-readable on the way. C(record.json) is
    C(0644).
  - Pinning. Every V(lookup), V(get) and V(put) returns RV(record_sha256), the sha256 of the key's C(record.json).
    A site that pins it (O(record_sha256); the build roles read C(gpufleet_artifact_record_pins)) makes a rewritten
    record and files refused, with a message naming the key, the pinned and the found digest.
  - What the checksums prove (threat model). Without a pin, integrity is self-referential - the record lists the
    sha256 of its files, and the record is read from the same store. A V(get) therefore catches a truncated,
    corrupted or half-copied file, or a file changed without its record; it does not catch a record and its files
    rewritten together by anyone who can write the store. With O(mode=controller) only the controller's user writes
    the store (the build node's files are fetched, checked and published by the controller), and that user already
    runs the play as root on every node, so a pin adds little. With O(mode=shared) every node that publishes can
    write the store, so one broken or compromised node (or anyone with write access to the export) could replace an
    artifact the whole fleet installs as root; pin the records there. Pinning stays opt-in because the digest exists
    only once a key is first published (a default pin would refuse every first build); a V(get) with O(mode=shared)
    and no O(record_sha256) that installs (or in check mode would install) files warns, naming the key and the
    digest to pin.
  - Staging. A publication assembles its files in C(<store>/.incoming/<kind>-<key>-<host>.<random>), held with
    C(flock) while it runs; the next publication removes those that nobody holds (a killed publisher's) and that
    belong to the user running it, under the store lock.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  action:
    support: full
    description: The store side runs in the controller process with O(mode=controller).
options:
  op:
    description: V(lookup) the key, V(get) its files into O(dest), V(put) (publish) the files of O(src), or
      V(describe) the files of O(src) (what V(put) would publish; O(store) is not read).
    type: str
    choices: [lookup, get, put, describe]
    required: true
  store:
    description:
      - The store's root directory, an absolute path (on the controller, or on the nodes with O(mode=shared)).
      - V(put) creates it if absent and takes its lock C(<store>/.lock), so it must be (or be creatable as) a
        directory the user can write, on a file system with C(flock); a read-only path, a file, or a path under
        C(/proc) or C(/sys) fails naming this option and the path.
    type: path
    required: true
  mode:
    description: V(controller) keeps the store on the controller; V(shared) uses a path every node mounts.
    type: str
    choices: [controller, shared]
    default: controller
  kind:
    description: The kind of artifact (a directory of the store).
    type: str
    choices: [nvshmem, deepep, deepgemm, deepep_jit]
    required: true
  key:
    description: The build key, lowercase hex, 16 to 64 characters (the build modules return it as C(key)).
    type: str
    required: true
  src:
    description: With V(put) and V(describe), the directory on the node that holds O(files); neither it nor a
      directory above it may be a symbolic link.
    type: path
  files:
    description:
      - With V(put) and V(describe), the names of the files of O(src) to publish, in install order (V(get) renames
        them into O(dest) in this order, so list last the file whose presence makes the artifact usable). Plain
        names, no C(/).
    type: list
    elements: str
  meta:
    description: With V(put), anything worth recording beside the files (versions, the build's inputs).
    type: dict
    default: {}
  dest:
    description: With V(get), the directory on the node that receives the files (created if absent); neither it
      nor a directory above it may be a symbolic link.
    type: path
  host:
    description: The publisher recorded with V(put); the action plugin sets the inventory hostname.
    type: str
  record_sha256:
    description:
      - The pinned sha256 of the key's C(record.json), 64 lowercase hex digits (the RV(record_sha256) a V(put) or
        V(lookup) returned). With V(lookup) and V(get), a record of another digest is refused and nothing is
        installed; with V(put), it is checked against a record the store holds already (a new publication's
        record has a new digest; pin the one it returns). Without it the record is not pinned (see the threat model
        above); a V(get) with O(mode=shared) that installs files from an unpinned record warns with the digest.
    type: str
  lock_timeout:
    description:
      - How long V(put) waits for the store lock C(<store>/.lock), in seconds (0 tries once, at most 86400). The
        failure names the lock file, its holder (the pid and start time the holder wrote into it) and this option.
    type: int
    default: 600
notes:
  - Every file is verified with sha256 at each V(get), on the node, after the copy.
seealso:
  - module: gpufleet.deepep.nvshmem_build
  - module: gpufleet.deepep.deepep_build
"""

EXAMPLES = r"""
- name: Look the NVSHMEM key up in the store
  gpufleet.deepep.artifact_store:
    op: lookup
    store: /srv/gpufleet/artifacts
    kind: nvshmem
    key: "{{ nvshmem_plan.key }}"
  register: stored

- name: Publish the packed install (the second publisher of a key reuses the first one's)
  gpufleet.deepep.artifact_store:
    op: put
    store: /srv/gpufleet/artifacts
    kind: nvshmem
    key: "{{ nvshmem_plan.key }}"
    src: /opt/nvshmem-artifacts
    files: ["nvshmem-{{ nvshmem_plan.key }}.tar.gz", "nvshmem-{{ nvshmem_plan.key }}.json"]
    meta:
      version: 3.5.19

- name: Install the wheel from a store every node mounts
  gpufleet.deepep.artifact_store:
    op: get
    mode: shared
    store: /mnt/fleet/artifacts
    kind: deepep
    key: "{{ deepep_plan.key }}"
    dest: /opt/deepep/artifacts/{{ deepep_plan.key }}
  register: fetched
  failed_when: not fetched.found
"""

RETURN = r"""
found:
  description: Whether the store holds the key (V(lookup), V(get)).
  returned: with op=lookup or op=get
  type: bool
published:
  description: With V(put), true when this call published the key (or would, in check mode), false when the key was
    in the store already and is reused.
  returned: with op=put
  type: bool
record:
  description: The key's record (empty when the store lacks it); in check mode with V(put), the record it would write.
  returned: always
  type: dict
  sample:
    kind: nvshmem
    key: 3f2a9c0d5e4b1a7f3f2a9c0d5e4b1a7f3f2a9c0d5e4b1a7f3f2a9c0d5e4b1a7f
    files:
      nvshmem-3f2a.tar.gz: {sha256: 9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de, size: 1048576}
    host: node-1
    published_at: '2026-11-24T05:00:00Z'
    meta: {}
path:
  description: The key's directory in the store.
  returned: always
  type: str
copied:
  description: With V(get), the files copied into O(dest) (or that would be); files already there are left out.
  returned: with op=get
  type: list
  elements: str
record_sha256:
  description:
    - The sha256 of the key's C(record.json), what O(record_sha256) pins; empty when the store lacks the key, and with
      V(put) in check mode when the key would be published (its record does not exist yet).
  returned: with op=lookup, op=get or op=put
  type: str
  sample: 5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592
files:
  description: With V(describe), each file of O(files) with its C(sha256), C(size) and C(mode) (octal, as C(0644)).
  returned: with op=describe
  type: dict
  sample:
    nvshmem-3f2a.tar.gz: {sha256: 9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de, size: 1048576,
                          mode: '0600'}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._storefs import LOCK_TIMEOUT
from ansible_collections.gpufleet.deepep.plugins.module_utils._store import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    StoreError,
    check_files,
    check_lock_timeout,
    check_pin,
    check_request,
    describe_sources,
    get_local,
    key_path,
    lookup_entry,
    put_local,
    unpinned_warning,
)


def run(params, check_mode):
    """The store operation ``params`` asks for, on this machine's view of the store (a dict result)."""
    store, kind, key = params["store"], params["kind"], params["key"]
    check_request(store, kind, key)
    check_lock_timeout(params.get("lock_timeout", LOCK_TIMEOUT))
    pin = check_pin(params.get("record_sha256"))
    shared = params.get("mode") == "shared"
    if params["op"] == "describe":
        described = describe_sources(params["src"], check_files(params["files"]))
        return {"changed": False, "files": dict((name, dict(entry, mode="%04o" % entry["mode"]))
                                                for name, entry in described.items())}
    if params["op"] == "lookup":
        record, digest = lookup_entry(store, kind, key, pin)
        return {"changed": False, "found": record is not None, "record": record or {},
                "path": key_path(store, kind, key), "record_sha256": digest}
    if params["op"] == "get":
        result = get_local(store, kind, key, params["dest"], check_mode=check_mode, pin=pin)
        warning = unpinned_warning(store, kind, key, result, check_mode) if pin is None and shared else None
        return dict(result, warnings=[warning]) if warning else result
    return put_local(store, kind, key, params["src"], params["files"], params.get("host"), params["meta"],
                     check_mode=check_mode, timeout=params.get("lock_timeout", LOCK_TIMEOUT), pin=pin)


def _main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    try:
        result = run(module.params, module.check_mode)
    except StoreError as exc:
        module.fail_json(msg="artifact store %s: %s" % (module.params["store"], exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="artifact store %s: %s" % (module.params["store"], exc))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


def main():
    guarded("artifact_store", _main)


if __name__ == "__main__":
    main()
