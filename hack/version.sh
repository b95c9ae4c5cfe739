#!/usr/bin/env bash
# Prints the version `make build` stamps into flowlb and `make image` puts
# in the image's labels and name: the nearest v* tag as git describes it,
# or, with no tag yet, the development version and the commit. "-dirty"
# marks uncommitted changes. Valid as an image tag (no "+").
set -euo pipefail
cd "$(dirname "$0")/.."
if v=$(git describe --tags --match 'v[0-9]*' --dirty --abbrev=12 2>/dev/null); then
	echo "$v"
	exit 0
fi
dirty=
git diff --quiet HEAD -- 2>/dev/null || dirty=-dirty
echo "v0.1.0-dev-g$(git rev-parse --short=12 HEAD)$dirty"
