#!/usr/bin/env bash
# Refreshes data/public_suffix_list.dat from PyPI's `publicsuffixlist`, a maintained, versioned
# package of the Public Suffix List (Debian 12's `publicsuffix` package is a 2023-02-09 snapshot),
# and records where it came from in data/public_suffix_list.source.
#
#   shared/data/refresh-public-suffix-list.sh VERSION     e.g. 1.1.2.20261023
#
# PYTHON: a python with pip (default python3). Review the diff of the list before committing it.
set -euo pipefail
version=${1:?usage: refresh-public-suffix-list.sh VERSION (see https://pypi.org/project/publicsuffixlist/)}
python=${PYTHON:-python3}
dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$tmp" "publicsuffixlist==$version"
wheel=$(ls "$tmp"/publicsuffixlist-*.whl)
"$python" -m zipfile -e "$wheel" "$tmp/unpacked"
cp "$tmp/unpacked/publicsuffixlist/public_suffix_list.dat" "$dir/public_suffix_list.dat"
{
    echo "package: publicsuffixlist $version (https://pypi.org/project/publicsuffixlist/$version/)"
    echo "wheel sha256: $(sha256sum "$wheel" | cut -d' ' -f1)"
    grep -m2 -E '^// (VERSION|COMMIT):' "$dir/public_suffix_list.dat"
} > "$dir/public_suffix_list.source"
echo "wrote $dir/public_suffix_list.dat ($(grep -vc -e '^//' -e '^$' "$dir/public_suffix_list.dat") rules)"
