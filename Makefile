# sbx — one non-recursive Makefile for the whole tree.
#
#   make                  build sbx-api, sbx-agent, sbx-init
#   make DEVELOPER=1      ... with -Werror
#   make SANITIZE=address,undefined   sanitized tree under build/san/
#   make deps             install missing Debian packages (as root)
#   make run              the local stack in the foreground
#   make test             unit tests, then the integration suite
#   make bench            benchmarks, written to docs/PERFORMANCE.md

CC      ?= cc
PKGS    := jansson hiredis libcurl libevent libmicrohttpd libseccomp
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
ALLCFLAGS = -std=gnu11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) \
            -Isandbox/common -Isandbox -Ifcgi $(PKG_CFLAGS) -MMD -MP
LDLIBS_ALL = $(PKG_LIBS) -lfcgi -lm

COMMON_SRC := $(wildcard sandbox/common/*.c)
INIT_SRC   := $(wildcard sandbox/init/*.c)
AGENT_SRC  := $(wildcard sandbox/*.c)
API_SRC    := $(wildcard fcgi/*.c)
UNIT_SRC   := $(wildcard tests/unit/*.c)

# sbx-init runs as PID 1 inside every sandbox, from whatever image it has:
# it is linked statically, without sanitizers, and needs only libc.
INIT_COMMON := sandbox/common/initproto.c

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))

COMMON_OBJ := $(call obj,$(COMMON_SRC))
AGENT_OBJ  := $(call obj,$(AGENT_SRC))
API_OBJ    := $(call obj,$(API_SRC))
UNIT_OBJ   := $(call obj,$(UNIT_SRC))
# Unit tests link every module except the programs' mains.
LIB_AGENT  := $(filter-out $(BUILD)/sandbox/agent.o,$(AGENT_OBJ))
LIB_API    := $(filter-out $(BUILD)/fcgi/main.o,$(API_OBJ))

BINS := $(BUILD)/sbx-api $(BUILD)/sbx-agent $(BUILD)/sbx-init

all: $(BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -c $< -o $@

$(BUILD)/sbx-api: $(API_OBJ) $(COMMON_OBJ)
	$(CC) $(SANFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/sbx-agent: $(AGENT_OBJ) $(COMMON_OBJ)
	$(CC) $(SANFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/sbx-init: $(INIT_SRC) $(INIT_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -D_GNU_SOURCE $(WARN) -O2 -Isandbox/common -static -o $@ $^

$(BUILD)/unit-tests: $(UNIT_OBJ) $(LIB_AGENT) $(LIB_API) $(COMMON_OBJ)
	$(CC) $(SANFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

deps:
	@deploy/deps

unit: $(BUILD)/unit-tests
	$(BUILD)/unit-tests

# The integration suite brings the real stack up itself (tests/integration/conftest.py).
integration: $(BINS)
	SBX_BUILD=$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration $(PYTEST_ARGS)

test: deps
	$(MAKE) all unit
	$(MAKE) integration

run: deps
	$(MAKE) all
	SBX_BUILD=$(BUILD) deploy/stack run

bench: deps
	$(MAKE) all
	SBX_BUILD=$(BUILD) $(PYTHON) tests/bench/run.py

clean:
	rm -rf build

.PHONY: all deps unit integration test run bench clean

-include $(shell find build -name '*.d' 2>/dev/null)
