#!/usr/bin/env bash
# make test: the project speaks only of itself. Fails on words that speak of how it was made (work
# periods, people who tested it, tracker numbers, the machine it was written on) in tracked files,
# printing FILE:LINE: TEXT for each; a comment says what a line guards against, a result carries its
# date and commit instead. Legitimate uses (the preload's Session object, a CURVE session) are listed
# in tools/checks/wording-allow.txt, one extended regex per line matched against "FILE:LINE:TEXT".
# Usage: tools/checks/check-wording.sh [FILE...]   (default: every file git tracks)
# Exit status: 0 clean, 1 offending lines found, 2 usage or environment error.
set -uo pipefail
cd "$(dirname "$0")/../.."
ALLOW=tools/checks/wording-allow.txt
# case-insensitive extended regexes; each names one way a text speaks of its own making
FORBIDDEN=(
    '\bsessions?\b'        # a work period ("the 9th session"); the preload's Session is allow-listed
    '\bsittings?\b'
    '\bbreakers?\b'        # who found a fault: say the fault instead
    '\breviewers?\b'
    '\bhelper-[0-9]+'
    '\bissues? #?[0-9]+'   # a tracker number: say what is measured or guarded
    '\bthe issue\b'
    '\bthis VM\b'         # the machine a figure came from: name it, with the date and commit
    '\bthese VMs\b'
    '\bengineers?\b'
)
[ -f "$ALLOW" ] || { echo "check-wording: $ALLOW is missing" >&2; exit 2; }
if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(git ls-files); fi
# the check's own two files name the words they forbid
skip='^tools/checks/(check-wording\.sh|wording-allow\.txt)$'
pattern=$(IFS='|'; echo "${FORBIDDEN[*]}")
allow=$(grep -vE '^\s*(#|$)' "$ALLOW")
checked=()
for f in "${files[@]}"; do
    [[ "$f" =~ $skip ]] && continue
    [ -f "$f" ] && [ ! -L "$f" ] && checked+=("$f")   # links and files deleted in the work tree: nothing to read
done
hits=""
[ ${#checked[@]} -gt 0 ] && hits=$(grep -nHIiE "$pattern" -- "${checked[@]}")
[ -n "$allow" ] && hits=$(grep -vE -f <(printf '%s\n' "$allow") <<< "$hits")
if [ -n "$hits" ]; then
    printf '%s\n' "$hits"
    echo "check-wording: $(wc -l <<< "$hits") line(s) speak of how the project was made; say what the line guards" \
         "against, or give a result's date and commit (legitimate uses: $ALLOW)" >&2
    exit 1
fi
echo "check-wording: ${#checked[@]} files clean"
