# Two set-up commands (README): `make quickstart` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fedsim-installed

.PHONY: quickstart test bench env

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

env: $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/fedsim run scenarios/quickstart.yaml --force

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/run_all.py
