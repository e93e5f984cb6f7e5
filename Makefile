# sbx: build, test, install, bench. `make install PREFIX=/usr DESTDIR=pkg`.
PREFIX  ?= /usr/local
DESTDIR ?=
BINS    := sbx-backup sbx-envfilter sbx-fw sbx-git-guard sbx-guest sbx-run sbx-tool-guard sbx-worktree sbx-server
BINDIR  := $(DESTDIR)$(PREFIX)/bin
MANDIR  := $(DESTDIR)$(PREFIX)/share/man/man1
BASHDIR := $(DESTDIR)$(PREFIX)/share/bash-completion/completions
ZSHDIR  := $(DESTDIR)$(PREFIX)/share/zsh/site-functions
FISHDIR := $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d

.PHONY: build debug test install install-shell install-later prefetch uninstall bench gen clean

# The git guard runs before every git command: it is linked statically
# (glibc's static libc), which takes the dynamic loader's ~0.3 ms off each
# call (bench/git-guard.sh). `cargo rustc -- -C ...` gives the flag to the
# binary's own compile and link only, so it reuses the dependencies the
# other tools' build compiled (RUSTFLAGS with a target triple, as before,
# compiled every dependency a second time: issue 40's first run).
HOST    := $(shell rustc -vV | sed -n 's/^host: //p')

# The sandbox's `git` is sbx-git-client, a libc-free static program that
# only forwards the call to the broker (glibc's start-up alone costs a call
# ~0.3 ms on a VM). It is no_std, so it needs panic=abort, which only its own
# compile gets (`cargo rustc -- -C panic=abort`; the workspace unwinds).
CLIENT  := cargo rustc --locked -p sbx-git-client --features client --bin sbx-git-client

# The [tools] checker is static too, and for a second reason: Claude Code
# starts it in the agent's environment, which the agent's own settings
# `env` can fill with LD_LIBRARY_PATH/LD_PRELOAD; a static program has no
# loader to take over (issue 38, class 1).
STATICS := sbx-git-guard sbx-tool-guard

# What build and install make: every tool unless TOOLS names some. The
# first shell needs no sbx-server, whose web stack (axum, tokio-postgres,
# argon2, utoipa) no other tool uses, so scripts/shell installs
# SHELL_TOOLS and scripts/server adds sbx-server after the shell's set-up.
# Nor does it need backups (sbx-backup: object_store, a sixth of the
# tools' compile) or branch mode (sbx-worktree): scripts/shell builds
# LATER_TOOLS in the background once the first shell is open.
TOOLS   ?= $(BINS)
LATER_TOOLS := sbx-backup sbx-worktree
SHELL_TOOLS := $(filter-out sbx-server $(LATER_TOOLS),$(BINS))
DYNAMIC = $(filter-out $(STATICS),$(TOOLS))
# scripts/shell's first build (QUICK=1) compiles at opt-level 0 sbx-run, the
# crates only it uses (its web terminal, YAML import, image builder), and
# two stacks that in the image only sbx-fw's cold paths use: the HTTP client
# (reqwest and what only it brings: the GitHub address-list fetch) and
# rcgen's (a certificate per intercepted host, made once). Optimised they
# were a quarter of that build's compile time, most of it at its end; what
# they do waits on the network, the engine or the guest. scripts/shell then installs optimised sbx-run and
# sbx-fw, and a base image with them, in the background; `sbx-run
# --version` names a quick build. scripts/one-build checks no tool in the
# image reaches a quick crate other than through reqwest or rcgen.
QUICK_PKGS := sbx-run sbx-image sbx-terminal axum axum-core saphyr saphyr-parser tungstenite tokio-tungstenite matchit mime \
	reqwest hyper hyper-util h2 http http-body http-body-util httparse httpdate tokio-util tower tower-http hyper-rustls \
	rcgen yasna time time-core deranged pem powerfmt num-conv
QUICK   ?= 0
QUICK_CONFIG = $(if $(filter 1,$(QUICK)),$(foreach p,$(QUICK_PKGS),--config profile.release.package.$(p).opt-level=0))
# The sandbox's git ships with the tools the sandbox runs.
WITH_CLIENT = $(filter sbx-guest,$(TOOLS))

# The static tools' own crates compile in the same cargo run as the rest
# (named as binaries there), beside the last crates instead of alone after
# them; `cargo rustc` then only relinks their binaries statically.
build:
	$(if $(DYNAMIC),cargo build --release --locked $(QUICK_CONFIG) $(addprefix --bin ,$(TOOLS)))
	for b in $(filter $(STATICS),$(TOOLS)); do \
	  cargo rustc --release --locked -p $$b --bin $$b -- -C target-feature=+crt-static || exit; \
	done
	$(if $(WITH_CLIENT),$(CLIENT) --release -- -C panic=abort)

install-shell:
	$(MAKE) install TOOLS="$(SHELL_TOOLS)"

install-later:
	$(MAKE) install TOOLS="$(LATER_TOOLS)"

# scripts/shell's sbx-prefetch, built before the tools (same QUICK).
prefetch:
	cargo build --release --locked $(QUICK_CONFIG) -p sbx-image --bin sbx-prefetch

# Debug builds of every binary, the client included (what the tests use).
debug:
	cargo build --workspace --locked
	$(CLIENT) -- -C panic=abort
	RUSTFLAGS="-C target-feature=+crt-static" \
	  cargo build --locked --bin sbx-tool-guard --target $(HOST)
	cp --remove-destination target/$(HOST)/debug/sbx-tool-guard target/debug/sbx-tool-guard

test:
	bash scripts/test

install: build
	install -d $(BINDIR) $(MANDIR) $(BASHDIR) $(ZSHDIR) $(FISHDIR)
	for b in $(TOOLS); do \
	  install -m 0755 target/release/$$b $(BINDIR)/$$b; \
	  install -m 0644 man/$$b.1 $(MANDIR)/$$b.1; \
	  install -m 0644 completions/bash/$$b $(BASHDIR)/$$b; \
	  install -m 0644 completions/zsh/_$$b $(ZSHDIR)/_$$b; \
	  install -m 0644 completions/fish/$$b.fish $(FISHDIR)/$$b.fish; \
	done
	$(if $(WITH_CLIENT),install -m 0755 target/release/sbx-git-client $(BINDIR)/sbx-git-client)

uninstall:
	for b in $(BINS); do \
	  rm -f $(BINDIR)/$$b $(MANDIR)/$$b.1 $(BASHDIR)/$$b $(ZSHDIR)/_$$b $(FISHDIR)/$$b.fish; \
	done
	rm -f $(BINDIR)/sbx-git-client

bench: build
	bash bench/run

gen:
	cargo xtask gen

clean:
	cargo clean
