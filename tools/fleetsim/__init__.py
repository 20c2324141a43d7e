# Copyright: (c) 2026, gpufleet.deepep contributors
# Apache License 2.0 (see LICENSE in the collection root)
"""fleetsim: a simulated GPU fleet on one Linux host (network, PID and mount namespaces, sshd per node)."""
