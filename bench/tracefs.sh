# SPDX-License-Identifier: Apache-2.0
# Sourced by bench/trace-*.sh: the tracefs steps they share. Each script
# names itself in TRACEFS_WHO and may define tracefs_undo (what it set
# beyond events, undone when tracing stops).
T=/sys/kernel/tracing

tracefs_stop() {
	echo 0 >"$T/tracing_on"
	if declare -F tracefs_undo >/dev/null; then tracefs_undo; fi
	echo >"$T/set_event"
}

# tracefs_open BUFFER_KB: tracing off, the buffer emptied and sized, no
# events set; tracing stops again however the script ends.
tracefs_open() {
	[ -w "$T/trace" ] || {
		echo "$TRACEFS_WHO: $T is not writable (root, tracefs mounted?)" >&2
		exit 1
	}
	trap tracefs_stop EXIT
	echo 0 >"$T/tracing_on"
	echo >"$T/trace"
	echo "$1" >"$T/buffer_size_kb"
	echo >"$T/set_event"
}

# tracefs_run OUT COMMAND [ARG...]: traces while COMMAND runs, writes the
# trace to OUT; its status is COMMAND's.
tracefs_run() {
	local out=$1 rc=0
	shift
	echo 1 >"$T/tracing_on"
	"$@" || rc=$?
	echo 0 >"$T/tracing_on"
	cat "$T/trace" >"$out"
	return $rc
}
