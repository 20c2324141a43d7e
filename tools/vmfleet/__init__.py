# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmfleet: real Debian virtual machines (QEMU) with the real kernel's RDMA stack (soft-RoCE)."""
