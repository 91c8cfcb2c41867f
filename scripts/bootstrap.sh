# Sourced by the other scripts: make ./.venv hold this project and its development tools.
# Idempotent: a second run only re-installs when pyproject.toml changed since the last install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
stamp="$venv/.installed-pyproject"
if [ ! -f "$stamp" ] || ! cmp -s "$root/pyproject.toml" "$stamp"; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root[dev]"
    cp "$root/pyproject.toml" "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$root"
