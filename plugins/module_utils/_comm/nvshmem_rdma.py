# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What an NVSHMEM version needs of rdma-core for its IBGDA transport, and whether a node's header meets it.

Standard library only, Python 3.8+ (this file runs on the managed nodes).

NVSHMEM builds its IB transports with ``NVSHMEM_USE_MLX5DV`` (on by default) and includes rdma-core's
``infiniband/mlx5dv.h``. Before 3.4.5 the build also needs ``MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT`` from that
header (runbook 000: "Ubuntu 24.04 NVSHMEM IBGDA compilation fails - MLX5DV not found", Ubuntu 24.04's
rdma-core 50 lacks it). From 3.4.5 on, ``src/modules/transport/common/transport_ib_common.h`` defines the symbol
itself when the header lacks it, so the header is enough. At run time NVSHMEM opens ``libmlx5.so`` and loads
``mlx5dv_is_supported`` at symbol version MLX5_1.8; the data-direct / dma-buf entry points
(``mlx5dv_reg_dmabuf_mr``, ``mlx5dv_get_data_direct_sysfs_path``) at MLX5_1.25 are optional.
"""

from __future__ import annotations

import re

__all__ = [
    "DATA_DIRECT_SYMBOL", "DEFINES_DATA_DIRECT_FROM", "MLX5DV_HEADER", "LIBMLX5_REQUIRED", "LIBMLX5_OPTIONAL",
    "NVSHMEM_VERSION_FORM", "NvshmemRdmaError", "nvshmem_rdma_needs", "mlx5dv_verdict",
]

DATA_DIRECT_SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"
# The first NVSHMEM release whose sources define DATA_DIRECT_SYMBOL when rdma-core's header lacks it.
DEFINES_DATA_DIRECT_FROM = (3, 4, 5)
MLX5DV_HEADER = "infiniband/mlx5dv.h"
LIBMLX5_REQUIRED = "MLX5_1.8"
LIBMLX5_OPTIONAL = "MLX5_1.25"
NVSHMEM_VERSION_FORM = ("an NVSHMEM version such as 3.4.5-0, 3.4.5 or v3.4.5-0 (major.minor[.patch][-package]), "
                        "or empty for an unknown version")

_VERSION_RE = re.compile(r"[vV]?(\d+)\.(\d+)(?:\.(\d+))?(?:-(\d+))?")


class NvshmemRdmaError(ValueError):
    """A value that is not an NVSHMEM version, or header facts of the wrong shape."""


def _release(version):
    """``(text, (major, minor, patch))`` of a version string; ``(None, None)`` for an unknown (empty) version."""
    if version is None:
        return None, None
    if not isinstance(version, str):
        raise NvshmemRdmaError("nvshmem_version: %r is not %s (got a %s; quote the version in YAML)"
                               % (version, NVSHMEM_VERSION_FORM, type(version).__name__))
    text = version
    if not text:
        return None, None
    match = _VERSION_RE.fullmatch(text)
    if not match:
        raise NvshmemRdmaError("nvshmem_version: %r is not %s" % (version, NVSHMEM_VERSION_FORM))
    major, minor, patch = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    return text[1:] if text[:1] in ("v", "V") else text, (major, minor, patch)


def nvshmem_rdma_needs(version):
    """What NVSHMEM ``version`` needs of rdma-core to build and run IBGDA.

    ``version``: ``3.4.5-0``, ``3.4.5``, ``v3.4.5-0``; None or empty for an unknown version (then the symbol is
    required, as before 3.4.5). Returns ``{nvshmem_version, known, header, symbols, defines_itself,
    libmlx5_required, libmlx5_optional, reason}``: ``symbols`` are the header symbols the build needs,
    ``defines_itself`` those its sources define when the header lacks them. Raises :class:`NvshmemRdmaError`
    naming the value and the expected form.
    """
    text, release = _release(version)
    floor = ".".join(str(p) for p in DEFINES_DATA_DIRECT_FROM)
    if release is None:
        symbols, defines_itself = [DATA_DIRECT_SYMBOL], []
        reason = ("the NVSHMEM version is unknown, so %s is required from rdma-core's headers (as NVSHMEM before "
                  "%s needs it; %s and newer define it themselves)" % (DATA_DIRECT_SYMBOL, floor, floor))
    elif release >= DEFINES_DATA_DIRECT_FROM:
        symbols, defines_itself = [], [DATA_DIRECT_SYMBOL]
        reason = ("NVSHMEM %s (%s or newer) defines %s itself when %s lacks it: it needs the header "
                  "(libibverbs-dev), not the symbol" % (text, floor, DATA_DIRECT_SYMBOL, MLX5DV_HEADER))
    else:
        symbols, defines_itself = [DATA_DIRECT_SYMBOL], []
        reason = ("NVSHMEM %s (older than %s) needs %s from rdma-core's headers (Ubuntu 24.04's rdma-core 50 "
                  "lacks it: DOCA-OFED's rdma-core has it)" % (text, floor, DATA_DIRECT_SYMBOL))
    return {
        "nvshmem_version": text,
        "known": release is not None,
        "header": MLX5DV_HEADER,
        "symbols": symbols,
        "defines_itself": defines_itself,
        "libmlx5_required": LIBMLX5_REQUIRED,
        "libmlx5_optional": LIBMLX5_OPTIONAL,
        "reason": reason,
    }


def mlx5dv_verdict(header, version):
    """Whether rdma-core's header meets what NVSHMEM ``version`` needs.

    ``header``: ``{present: bool, symbols: {symbol: bool}}`` (node_stack's ``gpufleet_symbols`` of one header).
    Every checked symbol is required except those ``version`` defines itself; with none left to require, the
    header's own presence is not asked here either (the nvshmem phase installs it with libibverbs-dev).
    Returns ``{ok, required, missing, waived, reason, needs}``: ``missing`` the required symbols the header lacks,
    ``waived`` the symbols it lacks that the version defines itself.
    """
    if not isinstance(header, dict) or not isinstance(header.get("present"), bool) \
            or not isinstance(header.get("symbols"), dict) \
            or not all(isinstance(k, str) and isinstance(v, bool) for k, v in header["symbols"].items()):
        raise NvshmemRdmaError("header: %r is not a header's facts (expected {present: true|false, symbols: "
                               "{SYMBOL: true|false}}, as node_stack's gpufleet_symbols gives for one header)"
                               % (header,))
    needs = nvshmem_rdma_needs(version)
    found = header["symbols"]
    required = [s for s in found if s not in needs["defines_itself"]]
    missing = [s for s in required if not found[s]]
    waived = [s for s in found if s in needs["defines_itself"] and not found[s]]
    ok = not missing and (header["present"] or (not required and bool(waived)))
    return {
        "ok": ok,
        "required": required,
        "missing": missing,
        "waived": waived,
        "reason": needs["reason"],
        "needs": needs,
    }
