# Copyright: (c) 2026, gpufleet.deepep contributors
# Apache License 2.0 (see LICENSE in the collection root)
"""Developer tools of the collection (not shipped as Ansible content)."""
