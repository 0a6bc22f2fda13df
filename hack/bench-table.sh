#!/usr/bin/env bash
# Formats `go test -bench` output on stdin as an aligned table, one row per
# benchmark with its metrics as columns; other lines pass through.
awk '
/^Benchmark/ {
	row = $1
	for (i = 3; i < NF; i += 2) row = row "\t" $i " " $(i+1)
	rows[++n] = row
	next
}
/^(ok|PASS|goos|goarch|pkg|cpu)/ { next }
{ print }
END {
	for (i = 1; i <= n; i++) print rows[i]
}' | column -t -s $'\t'
