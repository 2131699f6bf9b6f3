#!/bin/sh
# Checks deploy/systemd with Debian's `systemd-analyze verify` (make lint runs it): the unit
# and its Docker drop-in must load without a single warning. verify also wants ExecStart's
# binary to exist, so it checks a copy whose ExecStart runs /bin/true with the same arguments.
set -eu
cd "$(dirname "$0")"
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found: apt-get install systemd" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed 's|^ExecStart=/usr/local/bin/gantry |ExecStart=/bin/true |' gantry.service > "$dir/gantry.service"
grep -q '^ExecStart=/bin/true serve ' "$dir/gantry.service" || { echo "gantry.service: no ExecStart=/usr/local/bin/gantry serve ..." >&2; exit 1; }
mkdir "$dir/gantry.service.d"
cp gantry.service.d/docker.conf "$dir/gantry.service.d/"
# Only this directory's units: the host's own unit files are not what is checked.
out=$(SYSTEMD_UNIT_PATH="$dir:" systemd-analyze verify --man=no "$dir/gantry.service" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "deploy/systemd: systemd-analyze verify is clean"
