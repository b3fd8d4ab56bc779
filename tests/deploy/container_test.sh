#!/usr/bin/env bash
# The container image without building it (no Docker here): every shared
# library bin/skeind and bin/skeinctl need (DT_NEEDED, resolved as the
# loader would) must come from a package the runtime stage of
# deploy/Dockerfile installs (dpkg -S), or from libc6, which the
# debian:12-slim base holds; and the runtime stage must copy both binaries
# from the stage that builds them.  The image's Debian is the one this
# machine runs (bookworm): the same package names.
. "$(dirname "$0")/../agent/lib.sh"
DF=$ROOT/deploy/Dockerfile
command -v readelf >/dev/null || { fail "readelf is not installed (binutils, tools/deps.sh)"; finish; }

# the runtime stage: from the last FROM to the end
RT=$T_DIR/runtime
awk '/^FROM /{ s = "" } { s = s $0 "\n" } END { printf "%s", s }' "$DF" >"$RT"
check "the runtime stage is debian:12-slim" grep -q '^FROM debian:12-slim' "$RT"
# package names on its apt-get install lines (continuations joined)
pkgs=$(sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' "$RT" | grep 'apt-get install' |
	sed -E 's/.*apt-get install[^&]*-y( --no-install-recommends)?//; s/&&.*//' | tr ' ' '\n' | grep -v '^-' | grep -v '^$')
check "the runtime stage installs packages" [ -n "$pkgs" ]
allowed=" libc6 $(echo $pkgs) "

for b in skeind skeinctl; do
	check "$b is copied into the runtime stage from the build stage" \
		bash -c "grep -E '^COPY --from=build ' '$RT' | grep -q '/src/bin/$b'"
	check "the build stage builds bin/$b" grep -q "make .*bin/$b" "$DF"
	[ -x "$BIN/$b" ] || { fail "$BIN/$b is not built"; continue; }
	for lib in $(readelf -d "$BIN/$b" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
		path=$(ldd "$BIN/$b" | awk -v l="$lib" '$1 == l { print $3 }')
		[ -n "$path" ] && [ -e "$path" ] || { fail "$b: $lib does not resolve here"; continue; }
		pkg=""
		for p in "$path" "$(readlink -f "$path")" "/usr$path" "/usr$(readlink -f "$path")"; do
			pkg=$(dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$pkg" ] && break
		done
		if [ -z "$pkg" ]; then fail "$b: no Debian package holds $path"
		elif [[ "$allowed" == *" $pkg "* ]]; then pass "$b: $lib from $pkg, installed in the image"
		else fail "$b: $lib comes from $pkg, which deploy/Dockerfile's runtime stage does not install"; fi
	done
done
finish
