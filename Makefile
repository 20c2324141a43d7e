# gpufleet.deepep: the two commands of the Quick start are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath .)
VENV ?= $(ROOT)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(ROOT)/.collections
export PYTHONDONTWRITEBYTECODE := 1
# The playbook processes of the test tiers share one AnsiballZ payload cache (tools/callbacks/gpufleet_ansiballz_cache.py:
# a module's payload is built once per source state, not once per process; the Molecule scenarios enable the callback
# in .config/molecule/config.yml, the integration stages through TEST_CALLBACKS). Empty: every process builds its own.
export GPUFLEET_ANSIBALLZ_CACHE ?= $(ROOT)/build/ansiballz-cache
# And each playbook process loads the collection's filter, test and lookup plugins once, before its workers fork
# (the collection's callback plugin_preload, which ansible.cfg enables for every run: a worker that templates one
# collection filter imports and compiles every filter file and its plugin_utils, and the next task's worker again).
TEST_CALLBACKS := ANSIBLE_CALLBACK_PLUGINS=$(ROOT)/tools/callbacks \
  ANSIBLE_CALLBACKS_ENABLED=gpufleet_ansiballz_cache,gpufleet.deepep.plugin_preload
# The Molecule stage runs the scenarios of the simulated fleet. realvm (three real Debian guests under QEMU,
# tools/vmfleet) is the stage after it, alone on the machine: beside the other scenarios its emulated guests and they
# each ran 2-3x slower (make test 78 min); alone it takes 993-1,022 s on 2 cores, and its image (debootstrap, ~4 min)
# is built in the background while the first stages run. realvm_image (the golden-image flow on real
# guests) is run by name: make molecule MOLECULE_SCENARIOS=realvm_image.
MOLECULE_SCENARIOS ?= $(filter-out realvm realvm_image,$(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))))
FLEETSIM := $(VENV)/bin/python -m tools.fleetsim
DEMO_NODES ?= 4
BENCH_SIZES ?= 8 16 32 64
BENCH_TIME_LIMIT ?= 5400
# Molecule: scenarios at a time, the limit of one scenario (seconds), where each scenario's log goes.
MOLECULE_JOBS ?= 2
MOLECULE_TIMEOUT ?= 2400
MOLECULE_LOGS ?= $(ROOT)/build/molecule-logs
# The stages in order; the stages of a group joined by + run at the same time (lint, sanity, the unit tests and the
# controller's integration tests each keep about one core busy, the fleets' mostly wait on simulated nodes), each
# into its own log under build/stage-logs/, printed when the group ends.
STAGE_GROUPS := lint+sanity+unit+integration-fleet+integration-controller molecule realvm
STAGE_LOGS := $(ROOT)/build/stage-logs
TIMINGS := $(ROOT)/build/test-timings.txt
VMFLEET := $(VENV)/bin/python -m tools.vmfleet
VM_IMAGE_LOG := $(ROOT)/build/vm-image.log

.PHONY: help bootstrap test lint galaxy-importer changelog-lint yamllint ansible-lint sanity unit integration integration-fleet integration-controller molecule realvm demo demo-down bench bench-more clean

help:
	@echo "make demo       converge, verify and audit 4 simulated gcp_b200 nodes (a second run reuses them: changed=0)"
	@echo "make demo-down  stop the simulated fleet of the demo"
	@echo "make test       every test: lint, yamllint, ansible-test sanity, unit tests, Molecule scenarios, the real-VM tier"
	@echo "make bench      no-op converge, audit and every-phase converge at 8, 16, 32, 64 simulated nodes: cost per added node, controller CPU and memory, memory per node"
	@echo "make bench-more the other figures of tools/bench (fleet start, site.yml batches, audit, builds)"

bootstrap:
	@scripts/bootstrap.sh

# Every stage runs even after one failed (so each is timed); the timings are printed, and the run fails at the end.
test:
	@mkdir -p $(dir $(TIMINGS)) && scripts/stage_timer.sh $(TIMINGS) --begin
	@scripts/stage_timer.sh $(TIMINGS) bootstrap scripts/bootstrap.sh || { scripts/stage_timer.sh $(TIMINGS) --summary; exit 1; }
	@failed=""; mkdir -p $(STAGE_LOGS) $(MOLECULE_LOGS); rm -f $(MOLECULE_LOGS)/*.why; \
	( $(VMFLEET) image >$(VM_IMAGE_LOG) 2>&1 || echo "vm image: build failed (realvm builds it again)" >>$(VM_IMAGE_LOG) ) & \
	image_job=$$!; echo "== vm image: building in the background (log: $(VM_IMAGE_LOG))"; \
	for group in $(STAGE_GROUPS); do \
	  if [[ $$group == realvm ]]; then wait $$image_job; echo "== vm image: $$(tail -n 1 $(VM_IMAGE_LOG))"; fi; \
	  if [[ $$group != *+* ]]; then \
	    scripts/stage_timer.sh $(TIMINGS) $$group $(MAKE) --no-print-directory $$group || failed="$$failed $$group"; \
	    continue; \
	  fi; \
	  echo "== stages at the same time: $${group//+/ } (logs: $(STAGE_LOGS)/<stage>.log)"; \
	  pids=(); for stage in $${group//+/ }; do \
	    scripts/stage_timer.sh $(TIMINGS) $$stage $(MAKE) --no-print-directory $$stage >$(STAGE_LOGS)/$$stage.log 2>&1 & \
	    pids+=($$!); \
	  done; \
	  i=0; for stage in $${group//+/ }; do \
	    wait $${pids[$$i]} || failed="$$failed $$stage"; i=$$((i + 1)); cat $(STAGE_LOGS)/$$stage.log; \
	  done; \
	done; \
	wait; \
	scripts/stage_timer.sh $(TIMINGS) --summary; \
	if [[ -n "$$failed" ]]; then scripts/stage_why.sh $(STAGE_LOGS) $(MOLECULE_LOGS) $$failed; \
	  echo "make test: failed:$$failed"; exit 1; fi
	@echo "make test: all stages passed"

lint: yamllint ansible-lint changelog-lint galaxy-importer

changelog-lint: bootstrap
	antsibull-changelog lint

yamllint: bootstrap
	yamllint -s .

ansible-lint: bootstrap
	ansible-lint --profile production --strict

galaxy-importer: bootstrap
	scripts/galaxy_importer.sh

sanity: bootstrap
	scripts/sanity.sh

# The tiers: tests/unit imports and calls the collection's code (no ansible-playbook, no fleet, no root; a few
# minutes alone); tests/integration runs what is bigger than a call: ansible-playbook on the controller
# (tests/integration/controller), real wheel builds and pip installs in temporary directories, the real CPU torch
# wheel among them (tests/integration/builds), the test harness's own tools (tests/integration/tools) and simulated
# fleets (the rest, root and namespaces). tests/gpu runs on a GPU node only (tests/gpu/run_on_gpu_node.sh), never here.
unit: bootstrap
	python -m pytest -q tests/unit --durations=10

integration: integration-fleet integration-controller

# The two halves of tests/integration, stages of their own in `make test` (one pytest each: the first mostly waits on
# simulated nodes, the second keeps a core busy with ansible-playbook; together in one process the second waited for
# the first, and the group's last minutes left a core idle).
integration-fleet: bootstrap
	$(TEST_CALLBACKS) python -m pytest -q tests/integration --ignore=tests/integration/controller --durations=10

integration-controller: bootstrap
	$(TEST_CALLBACKS) python -m pytest -q tests/integration/controller --durations=10

molecule: bootstrap
	@python scripts/molecule_run.py --jobs $(MOLECULE_JOBS) --timeout $(MOLECULE_TIMEOUT) --logs $(MOLECULE_LOGS) \
	  $(MOLECULE_SCENARIOS)

# The real-VM tier: Molecule realvm by itself (its guests take both cores).
realvm: bootstrap
	@python scripts/molecule_run.py --jobs 1 --timeout $(MOLECULE_TIMEOUT) --logs $(MOLECULE_LOGS) realvm

demo: bootstrap
	DEMO_NODES=$(DEMO_NODES) VENV=$(VENV) scripts/demo.sh

demo-down: bootstrap
	$(FLEETSIM) down --purge

# Bounded (--time-limit) and never part of `make test`: BENCH_SIZES="8 16" for a shorter run.
bench: bootstrap
	$(VENV)/bin/python tools/bench/scale_bench.py --sizes $(BENCH_SIZES) --time-limit $(BENCH_TIME_LIMIT)

bench-more: bootstrap
	$(VENV)/bin/python tools/bench/fleet_bench.py
	$(VENV)/bin/python tools/bench/site_bench.py
	$(VENV)/bin/python tools/bench/audit_bench.py
	$(VENV)/bin/python tools/bench/build_bench.py

clean:
	rm -rf build .pytest_cache
