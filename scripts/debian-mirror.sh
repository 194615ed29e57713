# shellcheck shell=bash
# The Debian mirror this machine's apt already uses, for scripts that bootstrap another Debian
# root (scripts/trixie-root.sh, scripts/image.sh, docs/logs/fresh-demo.sh). A machine behind a
# company mirror or a caching proxy names it in its apt sources; a root bootstrapped from another
# address would fail there, or bypass the proxy. Sourced, not run:
#
#   . scripts/debian-mirror.sh
#   mirror=$(debian_mirror)                    # e.g. http://mirror.example.com/debian
#   security=$(debian_mirror security)         # e.g. http://mirror.example.com/debian-security
#
# MEGABATCH_TRIXIE_MIRROR, when set, overrides the archive mirror (not the security one).
# Both read /etc/apt/sources.list and /etc/apt/sources.list.d/*.list (one-line form) and
# *.sources (deb822 form; stanzas with "Enabled: no" are skipped). An entry counts when its
# suite is a Debian release's (bookworm, trixie-updates, stable, sid, ...): third-party
# repositories name their own suites. Mirror lists (mirror://, mirror+file:) are skipped, since
# debootstrap takes one address. APT_SOURCES_DIR (default /etc/apt) is for the tests.

# "URI SUITE" per line, for every enabled deb entry of the apt sources.
apt_source_entries() {
  local dir=${APT_SOURCES_DIR:-/etc/apt}
  local lists=() stanzas=() f
  [[ -f $dir/sources.list ]] && lists+=("$dir/sources.list")
  for f in "$dir"/sources.list.d/*.list; do [[ -f $f ]] && lists+=("$f"); done
  for f in "$dir"/sources.list.d/*.sources; do [[ -f $f ]] && stanzas+=("$f"); done
  if ((${#lists[@]})); then
    # deb [options] URI SUITE COMPONENTS...
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                       if (i + 1 <= NF) print $i, $(i + 1) }' "${lists[@]}"
  fi
  local s
  for s in "${stanzas[@]}"; do
    awk 'function flush() { if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false)$/)
                              for (u in uris) for (s in suites) print uris[u], suites[s]
                            types = ""; enabled = ""; delete uris; delete suites }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key); $1 = "" }
         key == "types" { types = $0 } key == "enabled" { enabled = tolower($2) }
         key == "uris" { for (i = 2; i <= NF; i++) uris[i] = $i }
         key == "suites" { for (i = 2; i <= NF; i++) suites[i] = $i }
         END { flush() }' "$s"
  done
}

# The archive mirror (debian_mirror) or the security mirror (debian_mirror security), without a
# trailing slash. Fails with what to do when the apt sources name none.
debian_mirror() {
  local want=${1:-archive}
  if [[ $want == archive && -n ${MEGABATCH_TRIXIE_MIRROR:-} ]]; then
    echo "${MEGABATCH_TRIXIE_MIRROR%/}"
    return
  fi
  local release='(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)'
  local pattern="^$release(-updates|-backports|-proposed-updates)?\$"
  [[ $want == security ]] && pattern="^$release(-security|/updates)\$"
  local uri suite
  while read -r uri suite; do
    [[ $uri == mirror* || ! $suite =~ $pattern ]] && continue
    echo "${uri%/}"
    return
  done < <(apt_source_entries)
  local fix="add one there"
  [[ $want == archive ]] && fix="add one there, or set MEGABATCH_TRIXIE_MIRROR=http://your.mirror/debian"
  echo "debian-mirror.sh: no Debian $want mirror in the apt sources under ${APT_SOURCES_DIR:-/etc/apt}" \
    "(sources.list, sources.list.d/*.list, *.sources): $fix" >&2
  return 1
}
