# The two commands: `make run` serves the demo, `make test` runs the tests.
PY := .venv/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint fmt bootstrap migrate conformance bench clean phone-screenshots

bootstrap:
	@scripts/bootstrap

# One Django boot: migrate, seed the demo if the database is empty, serve.
run: bootstrap
	$(PY) manage.py serve --migrate --seed-demo --host $(HOST) --port $(PORT)

test: bootstrap
	$(PY) -m pytest $(PYTEST_ARGS)

lint: bootstrap
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .

fmt: bootstrap
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

migrate: bootstrap
	$(PY) manage.py migrate --no-input

# Everything the targets and the tests generate; bench/results/ (make bench's figures) is kept.
clean:
	rm -rf .venv .tools var .conformance screenshots \
	  .pytest_cache .hypothesis .mypy_cache .ruff_cache celerybeat-schedule*
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

conformance: bootstrap
	scripts/conformance

# BENCH=peers: only the peer section (bench/peers.py: FastMCP + fastmcp-tasks side by side).
bench: bootstrap
	@command -v hey >/dev/null || (apt-get update -qq && apt-get install -y -qq hey)
	$(PY) bench/run_all.py $(if $(BENCH),--only $(BENCH))

# Phone screenshots (390×844) of the task list, the audit list and a task page of CHECKOUT
# (default: this one; bootstrapped) into OUT (default screenshots/phone/).
CHECKOUT ?= .
OUT ?= screenshots/phone
phone-screenshots: bootstrap
	$(PY) scripts/phone_screenshots --checkout $(CHECKOUT) --out $(OUT)
