# The two commands a newcomer needs: `make run` serves the app, `make test` checks everything.
# Both create .venv on first use and install what they need into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8501
PYTEST_ARGS ?=

.PHONY: run test lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.app-installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.app-installed

## Serve the app on http://localhost:$(PORT) (PORT=8502 make run for a second copy).
run: $(VENV)/.app-installed
	$(BIN)/streamlit run app.py --server.port $(PORT)

## Lint, then the whole test suite.
test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.dev-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
