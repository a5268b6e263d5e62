#!/bin/sh
# The demo's validation: exit 0 only when every check passes.
fail=0
check() {
  got=$(sh calc.sh "$1" "$2" "$3" 2>&1)
  if [ "$got" = "$4" ]; then
    echo "ok   calc $1 $2 $3 = $4"
  else
    echo "FAIL calc $1 $2 $3: expected $4, got '$got'"
    fail=1
  fi
}
check add 2 3 5
check add -1 1 0
check mul 4 5 20
check mul 0 7 0
exit $fail
