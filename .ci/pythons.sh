# Sourced by .ci/run and .ci/package.
python_at() {  # python_at 3.12: the path of this machine's newest Python 3.12.x, or nothing
  local v="$1" found
  if found=$("python$v" -c 'import sys; print(sys.executable)' 2>/dev/null); then
    echo "$found"; return
  fi
  command -v pyenv >/dev/null || return 0
  found=$(pyenv versions --bare 2>/dev/null | grep -E "^${v//./\\.}(\.[0-9]+)?$" | sort -V | tail -1)
  [ -n "$found" ] && PYENV_VERSION="$found" python3 -c 'import sys; print(sys.executable)' 2>/dev/null
}
