# slurm-hooks: run one of a site's LBNL NHC check functions without NHC's driver.
#
# Run by slurm_hooks/detect/site/nhc_function.py as
#   bash --noprofile --norc -- nhc_shim.bash RUN DIR ONLY TIMEOUT N NAME=VALUE... FUNCTION ARG...
# RUN: a private directory of the caller's for this run; DIR: the scripts
# directory (NHC's $INCDIR), whose *.nhc are sourced in bash's glob order, as
# NHC sources them; ONLY: "*" (every one) or the names of those to source,
# each between slashes ("/site.nhc/common.nhc/": the caller left out the files
# whose loading cannot change what the function does, see
# slurm_hooks/detect/site/nhc_scripts.py); TIMEOUT: whole
# seconds (NHC's $TIMEOUT; the caller kills the process group past it); N: how
# many NAME=VALUE words follow (variables set before the scripts are sourced and
# again after, as /etc/sysconfig/nhc and nhc.conf settings are); then the
# function and its arguments.  Every value is a positional parameter; nothing
# here is evaluated, and names are checked against bash's name rule before use.
#
# Everything goes to files in RUN, never to the caller's pipes: a process the
# function leaves running (NHC's own command timers do) cannot hold them open.
# RUN/output: what the function and the scripts print.  RUN/channel, one line
# each:
#   loaded K        K *.nhc files were sourced
#   died MESSAGE    the function called die
#   subshell-died MESSAGE
#                   a subshell of it did: under NHC that subshell ends, the
#                   check goes on, and the node is online again at the end
#                   of a run that passes, so only the function's status counts
#   undefined       no function of that name after sourcing (exit 127)
#
# The driver's functions keep the semantics of NHC's `nhc` (github.com/mej/nhc);
# this is a stand-in written from them, not NHC's code:
# * die RC MESSAGE: records MESSAGE and ends the check with RC, as NHC run
#   without -a ends there; marking the node offline is slurm-hooks' job, so
#   OFFLINE_NODE and ONLINE_NODE are ':' and MARK_OFFLINE is 0;
# * log, vlog, dbg print under SILENT=0, VERBOSE=1, DEBUG=1; oecho, eecho,
#   vecho print to NHC_FD_OUT / NHC_FD_ERR; syslog collects its text and
#   syslog_flush prints it; kill_watchdog has no watchdog to kill;
# * nhcmain_watchdog_timer SECONDS PID (NHC's check_cmd_status times its
#   command with it): after SECONDS, SIGALRM to PID, then SIGTERM a second
#   later, then SIGKILL three seconds after that, each only while PID lives.
# The scripts are sourced inside a function with IFS empty and globbing on only
# for the file list (NHC's nhcmain_load_scripts); the check runs with globbing
# off (set -f), as under NHC.

__shk_run=$1
shift
exec </dev/null >>"$__shk_run/output" 2>&1
function __shk_say() { printf '%s\n' "$*" >>"$__shk_run/channel"; }
__shk_name='^[A-Za-z_][A-Za-z0-9_]*$'
__shk_dir=$1 __shk_only=$2 __shk_timeout=$3 __shk_n=$4
shift 4
[[ "$__shk_only" == "*" || "$__shk_only" == /* ]] || { echo "slurm-hooks: bad file list" >&2; exit 70; }
__shk_env=()
while ((__shk_n > 0)); do
    [[ "$1" == *=* && "${1%%=*}" =~ $__shk_name ]] || { echo "slurm-hooks: bad variable" >&2; exit 70; }
    __shk_env+=("$1")
    shift
    __shk_n=$((__shk_n - 1))
done
__shk_fn=$1
shift
[[ "$__shk_fn" =~ $__shk_name ]] || { echo "slurm-hooks: bad function name" >&2; exit 70; }

NAME=nhc CONFDIR=/etc/nhc INCDIR=$__shk_dir HELPERDIR=/usr/libexec/nhc
SYSCONFIGDIR=/etc/sysconfig LIBEXECDIR=/usr/libexec
HOSTNAME=${HOSTNAME:-localhost}
[[ -r /proc/sys/kernel/hostname ]] && read -r HOSTNAME </proc/sys/kernel/hostname
HOSTNAME_S=${HOSTNAME/%.*/}
RET=0 LOGGER_TEXT="" NHC_PID=$$ NHC_START_TS=0 WATCHDOG_PID=0 FAIL_CNT=0 FORCE_SETSID=0 NHC_SID=0
NHC_FD_OUT=1 NHC_FD_ERR=2 DEBUG=0 TS=0 SILENT=0 VERBOSE=0 MARK_OFFLINE=0 DETACHED_MODE=0
DETACHED_MODE_FAIL_NODATA=0 TIMEOUT=$__shk_timeout NHC_CHECK_ALL=0 NHC_CHECK_FORKED=0 NHC_RM=slurm
ONLINE_NODE=: OFFLINE_NODE=: LOGFILE="" RESULTFILE=/var/run/nhc/nhc.status
export SYSCONFIGDIR LIBEXECDIR HOSTNAME HOSTNAME_S RET LOGGER_TEXT NHC_PID NHC_START_TS WATCHDOG_PID
export FAIL_CNT FORCE_SETSID NHC_FD_OUT NHC_FD_ERR NAME CONFDIR INCDIR HELPERDIR ONLINE_NODE
export OFFLINE_NODE LOGFILE DEBUG TS SILENT TIMEOUT NHC_RM NHC_SID

function die() {
    IFS=$' \t\n'
    local rc="$1" msg
    shift
    CHECK_DIED=1
    [[ -z "$CHECK" ]] && CHECK="${FUNCNAME[0]} $*"
    log "ERROR:  $NAME:  Health check failed:  $*"
    syslog "Health check failed:  $*"
    msg="$*"
    if [[ "$BASHPID" == "$$" ]]; then
        __shk_say "died ${msg//[$'\n\r']/ }"
    else
        __shk_say "subshell-died ${msg//[$'\n\r']/ }"
    fi
    exit "$rc"
}
function dbg() { [[ "$DEBUG" == "1" ]] && echo "DEBUG:  $*"; return 0; }
function log() { [[ "$SILENT" == "0" ]] && echo "$@"; return 0; }
function vlog() { [[ "$VERBOSE" == "1" ]] && echo "$@"; return 0; }
function oecho() { [[ "$SILENT" == "0" ]] && echo "$@" >&"$NHC_FD_OUT"; return 0; }
function eecho() { [[ "$SILENT" == "0" ]] && echo "$@" >&"$NHC_FD_ERR"; return 0; }
function vecho() { [[ "$VERBOSE" == "1" ]] && echo "$@" >&"$NHC_FD_OUT"; return 0; }
function syslog() {
    if [[ -z "$LOGGER_TEXT" ]]; then LOGGER_TEXT="$*"; else LOGGER_TEXT="$LOGGER_TEXT"$'\n'"$*"; fi
}
function syslog_flush() { [[ -n "$LOGGER_TEXT" ]] && echo "syslog: $LOGGER_TEXT"; LOGGER_TEXT=""; }
function kill_watchdog() { return 0; }
function nhcmain_watchdog_timer() {
    local timeout="$1" pid="$2" sleep_pid
    sleep "$timeout" &
    sleep_pid=$!
    trap '' ALRM TERM
    trap "kill -9 $sleep_pid >&/dev/null; exit 0" EXIT HUP INT QUIT PIPE USR1 USR2
    wait "$sleep_pid"
    kill -s ALRM -- "$pid" 2>/dev/null || return 0
    sleep 1
    kill -s TERM -- "$pid" 2>/dev/null || return 0
    sleep 3
    kill -s KILL -- "$pid" 2>/dev/null
    return 0
}

function __shk_load() {
    local -a files
    local IFS='' f loaded=0
    set +f
    files=("$INCDIR"/*.nhc)
    set -f
    for f in "${files[@]}"; do
        if [[ -e "$f" && ("$__shk_only" == "*" || "$__shk_only" == *"/${f##*/}/"*) ]]; then
            # shellcheck disable=SC1090  # the site's own scripts
            . "$f"
            loaded=$((loaded + 1))
        fi
    done
    __shk_say "loaded $loaded"
}

set -f
((${#__shk_env[@]})) && export -- "${__shk_env[@]}"
__shk_load
((${#__shk_env[@]})) && export -- "${__shk_env[@]}"
declare -F -- "$__shk_fn" >/dev/null || { __shk_say undefined; exit 127; }
CHECK="$__shk_fn $*" CHECK_DIED=0
"$__shk_fn" "$@"
