# sbx — one non-recursive Makefile for the whole tree.
#
#   make                  build sbx-api, sbx-agent, sbx-init
#   make DEVELOPER=1      ... with -Werror
#   make SANITIZE=address,undefined   sanitized tree under build/san/
#   make deps             install missing Debian packages (as root)
#   make ui               the static pages of ui/ with xterm.js from npm (build/ui/)
#   make run              the local stack in the foreground
#   make test             unit tests, the integration suite, then test-multihost
#   make test-multihost   three hosts in network namespaces sharing one Redis
#   make bench            benchmarks, written to docs/PERFORMANCE.md
#   make fuzz             libFuzzer harnesses (tests/fuzz/), FUZZ_SECONDS each
#   make clang            the tree and unit tests with clang -Werror (build/clang/)
#   make shellcheck       lint every shell script

CC      ?= cc
PKGS    := jansson hiredis libcurl libevent libmicrohttpd libseccomp libarchive libcrypto
PYTHON  := /usr/bin/python3

ifdef SANITIZE
BUILD   := build/san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
else
BUILD   := build
SANFLAGS :=
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wvla -Wwrite-strings -Wno-unused-parameter
ifdef DEVELOPER
WARN += -Werror
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) libevent_pthreads 2>/dev/null)

CFLAGS   ?= -O2 -g
BASECFLAGS = -std=gnu11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) $(PKG_CFLAGS) -MMD -MP
LDLIBS_ALL = $(PKG_LIBS) -lfcgi -lm

# The layers, each a folder, each with the include path of what it may use
# (docs/ARCHITECTURE.md, "The source tree"): including a header of a layer
# above is a compile error, not a review comment.
#   sandbox/common    shared by every binary          sees: common
#   sandbox/init      sbx-init, PID 1 of a sandbox    sees: common
#   sandbox/runtime   the sandbox runtime library     sees: runtime, common
#   sandbox/agent     the agent's infrastructure      sees: agent, runtime, common
#   sandbox/features  the agent's feature modules     sees: features, agent, runtime, common
#   fcgi              sbx-api                         sees: fcgi, common
INC_COMMON   := -Isandbox/common
INC_RUNTIME  := -Isandbox/runtime $(INC_COMMON)
INC_AGENT    := -Isandbox/agent $(INC_RUNTIME)
INC_FEATURES := -Isandbox/features $(INC_AGENT)
INC_API      := -Ifcgi $(INC_COMMON)
INC_ALL      := $(INC_FEATURES) -Ifcgi

COMMON_SRC   := $(wildcard sandbox/common/*.c)
INIT_SRC     := $(wildcard sandbox/init/*.c)
RUNTIME_SRC  := $(wildcard sandbox/runtime/*.c)
AGENT_SRC    := $(wildcard sandbox/agent/*.c)
FEATURES_SRC := $(wildcard sandbox/features/*.c)
API_SRC      := $(wildcard fcgi/*.c)
UNIT_SRC     := $(wildcard tests/unit/*.c)

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))

COMMON_OBJ := $(call obj,$(COMMON_SRC))
NODE_OBJ   := $(call obj,$(RUNTIME_SRC) $(AGENT_SRC) $(FEATURES_SRC))
API_OBJ    := $(call obj,$(API_SRC))
UNIT_OBJ   := $(call obj,$(UNIT_SRC))
# Unit tests link every module except the programs' mains.
LIB_AGENT  := $(filter-out $(BUILD)/sandbox/agent/agent.o,$(NODE_OBJ))
LIB_API    := $(filter-out $(BUILD)/fcgi/main.o,$(API_OBJ))

BINS := $(BUILD)/sbx-api $(BUILD)/sbx-agent $(BUILD)/sbx-init

all: $(BINS)

# A change of compiler or flags (DEVELOPER=1, SANITIZE=, CFLAGS=) rebuilds
# every object: they all depend on this stamp, rewritten only when the
# flags differ from the last build's.
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW   := $(CC) $(BASECFLAGS) $(LDFLAGS)
ifneq ($(FLAGS_NOW),$(shell cat $(FLAGS_STAMP) 2>/dev/null))
$(shell mkdir -p $(BUILD) && printf '%s\n' '$(FLAGS_NOW)' >$(FLAGS_STAMP))
endif

$(BUILD)/sandbox/common/%.o:   INC := $(INC_COMMON)
$(BUILD)/sandbox/runtime/%.o:  INC := $(INC_RUNTIME)
$(BUILD)/sandbox/agent/%.o:    INC := $(INC_AGENT)
$(BUILD)/sandbox/features/%.o: INC := $(INC_FEATURES)
$(BUILD)/fcgi/%.o:             INC := $(INC_API)
$(BUILD)/tests/unit/%.o:       INC := $(INC_ALL)

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASECFLAGS) $(INC) -c $< -o $@

$(BUILD)/sbx-api: $(API_OBJ) $(COMMON_OBJ)
	$(CC) $(SANFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/sbx-agent: $(NODE_OBJ) $(COMMON_OBJ)
	$(CC) $(SANFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

# sbx-init runs as PID 1 inside every sandbox, from whatever image it has:
# it is linked statically, without sanitizers, and needs only libc. Its
# objects are its own (no sanitizer flags) and track their headers, so a
# change of initproto.h rebuilds it.
INIT_CFLAGS := -std=gnu11 -D_GNU_SOURCE $(WARN) -O2 $(INC_COMMON) -MMD -MP
INIT_OBJ    := $(patsubst %.c,$(BUILD)/init-obj/%.o,$(INIT_SRC) sandbox/common/initproto.c sandbox/common/sigdfl.c \
               sandbox/common/vmchild.c sandbox/common/util.c sandbox/common/log.c)

$(BUILD)/init-obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(INIT_CFLAGS) -c $< -o $@

$(BUILD)/sbx-init: $(INIT_OBJ)
	$(CC) -static -o $@ $^

$(BUILD)/unit-tests: $(UNIT_OBJ) $(LIB_AGENT) $(LIB_API) $(COMMON_OBJ)
	$(CC) $(SANFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

deps:
	@deploy/deps

# The static pages of ui/ with their browser libraries from npm (pinned by
# ui/package-lock.json), into $(BUILD)/ui/: nginx serves them at /ui/. The
# npm registry is needed at build time only; nothing is fetched at run time.
UI_PAGES  := $(wildcard ui/*.html ui/*.js ui/*.css)
UI_VENDOR := ui/node_modules/@xterm/xterm/lib/xterm.js ui/node_modules/@xterm/xterm/css/xterm.css \
             ui/node_modules/@xterm/addon-fit/lib/addon-fit.js
ui: $(BUILD)/ui/.stamp
$(BUILD)/ui/.stamp: $(UI_PAGES) ui/package.json ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(BUILD)/ui/vendor
	cp $(UI_PAGES) $(BUILD)/ui/
	cp $(UI_VENDOR) $(BUILD)/ui/vendor/
	touch $@

unit: $(BUILD)/unit-tests
	$(BUILD)/unit-tests

# The integration suite brings the real stack up itself (tests/integration/conftest.py).
integration: $(BINS) ui
	SBX_BUILD=$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration $(PYTEST_ARGS)

# Three hosts in network namespaces, one Redis (tests/multihost/hosts); root.
# About 20 s, so it is part of `make test`.
test-multihost: $(BINS)
	SBX_BUILD=$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/multihost $(PYTEST_ARGS)

test: deps
	$(MAKE) all unit
	$(MAKE) integration
	$(MAKE) test-multihost

run: deps
	$(MAKE) all ui
	SBX_BUILD=$(BUILD) deploy/stack run

bench: deps
	$(MAKE) all
	SBX_BUILD=$(BUILD) $(PYTHON) tests/bench/run.py

# Two minutes of mixed load at ~60% of the measured peak; RSS and fd samples
# of the API pool and the agents every 10 s; then the soak under abuse (one
# tenant attacks the node, another's execs must see no error). Not part of
# `make test`.
soak: deps
	$(MAKE) all
	SBX_BUILD=$(BUILD) $(PYTHON) tests/soak/run.py $(SOAK_ARGS)
	SBX_BUILD=$(BUILD) $(PYTHON) tests/soak/abuse.py $(ABUSE_ARGS)

clean:
	rm -rf build

.PHONY: all deps ui unit integration test test-multihost run bench soak clean

# The second compiler and the shell linter of CI (.ci/run):
#   make clang        the tree and the unit tests with clang -Werror, in build/clang/
#   make shellcheck   every shell script of the tree
SHELL_SCRIPTS := deploy/stack deploy/deps deploy/images/build-debian .ci/run tests/fuzz/run \
                 tests/multihost/hosts

clang:
	$(MAKE) CC=clang DEVELOPER=1 BUILD=build/clang all build/clang/unit-tests
	build/clang/unit-tests

shellcheck:
	shellcheck $(SHELL_SCRIPTS)

.PHONY: clang shellcheck

# --- fuzzing (libFuzzer harnesses in tests/fuzz/) ---------------------------
#   make fuzz             build every harness, run each for FUZZ_SECONDS
#   make fuzz-smoke       the same for FUZZ_SMOKE_SECONDS each (CI)
# The modules are rebuilt from source with clang into build/fuzz/ (coverage
# instrumentation + ASan/UBSan) and archived, so that a harness links only
# what it reaches. New corpus entries go to build/fuzz/corpus/<target>/,
# crashes to build/fuzz/artifacts/; the seeds in tests/fuzz/corpus/ are
# only read.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 20
FUZZ_SMOKE_SECONDS ?= 5
FUZZ_DIR     := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS   = -std=gnu11 -D_GNU_SOURCE $(filter-out -Werror,$(WARN)) -O1 -g $(FUZZ_SAN) \
                $(INC_ALL) $(PKG_CFLAGS) -MMD -MP
FUZZ_LIB_SRC := $(COMMON_SRC) $(RUNTIME_SRC) $(filter-out sandbox/agent/agent.c,$(AGENT_SRC)) $(FEATURES_SRC) \
                $(filter-out fcgi/main.c,$(API_SRC))
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_LIB_SRC))
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,$(FUZZ_DIR)/%,$(FUZZ_SRC))

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/libsbx.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_DIR)/libsbx.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_DIR)/libsbx.a $(LDLIBS_ALL)

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	tests/fuzz/run $(FUZZ_SECONDS) $(FUZZ_BINS)

fuzz-smoke: fuzz-build
	tests/fuzz/run $(FUZZ_SMOKE_SECONDS) $(FUZZ_BINS)

.PHONY: fuzz fuzz-build fuzz-smoke

-include $(shell find build -name '*.d' 2>/dev/null)
