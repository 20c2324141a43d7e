# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleetsim: a simulated GPU fleet on one Linux host (network, PID and mount namespaces, sshd per node)."""
