#!/usr/bin/env bash
#SBATCH --job-name=noa
#SBATCH --array=0-9
#SBATCH --cpus-per-task=4
#SBATCH --mem=8G
#SBATCH --time=01:00:00
#SBATCH --output=noa-%A_%a.log
#
# One noa command over a folder of files as a Slurm job array, running the noa image with Apptainer.
# Task k of n (in array order) takes files k, k+n, k+2n, ... of the folder's sorted listing, so
# every file is processed by exactly one task, whatever --array says (0-9, 1-100%10, 0-20:2 ...).
# Each task runs noa once over its share (`--out-dir`: one bad file does not stop the others; the
# task fails if any file failed).
#
# Usage:  sbatch [--array=0-N] examples/slurm_apptainer.sh IN_DIR OUT_DIR [COMMAND [OPTION...]]
#   COMMAND is permute, copy or broadcast (they take --out-dir); default: permute --axes 0,1,3,2
#   sbatch --array=0-19 examples/slurm_apptainer.sh raw/ swapped/ copy --order F --dtype float32
#
# Environment:
#   NOA_SIF      the image (default: noa.sif beside the job's working directory). Make it with
#                `apptainer build noa.sif docker-daemon://noa:latest`, or from a saved image:
#                `podman save -o noa.tar noa:latest && apptainer build noa.sif docker-archive://noa.tar`
#   NOA_PATTERN  which files of IN_DIR (default: *.mrc)
#   APPTAINER    apptainer or singularity binary (default: apptainer, else singularity)
#   NOA          run this command instead of the image, e.g. NOA=noa for a local install (tests do)
# Outside Slurm it runs as task 0 of 1 (every file), with SLURM_* variables faked as a test would.
set -euo pipefail

die() { echo "slurm_apptainer.sh: error: $*" >&2; exit 2; }

[[ $# -ge 2 ]] || die "usage: slurm_apptainer.sh IN_DIR OUT_DIR [COMMAND [OPTION...]]"
in_dir="$(cd "$1" && pwd)" || die "no folder $1"
mkdir -p "$2" || die "cannot create $2"
out_dir="$(cd "$2" && pwd)"
shift 2
command=(permute --axes "0,1,3,2")
[[ $# -gt 0 ]] && command=("$@")
case "${command[0]}" in permute | copy | broadcast) ;; *) die "COMMAND must be permute, copy or broadcast";; esac

# This task's position among the array's tasks (ids may start above 0 or step: --array=1-9:2).
task_id="${SLURM_ARRAY_TASK_ID:-0}"
task_min="${SLURM_ARRAY_TASK_MIN:-0}"
task_step="${SLURM_ARRAY_TASK_STEP:-1}"
task_count="${SLURM_ARRAY_TASK_COUNT:-1}"
index=$(( (task_id - task_min) / task_step ))
(( index >= 0 && index < task_count )) || die "task $task_id is outside the array (min $task_min, count $task_count)"

# Every task must list the same files in the same order, whatever the node's locale.
export LC_ALL=C
shopt -s nullglob
# shellcheck disable=SC2206  # the pattern is meant to be expanded here
all=("$in_dir"/${NOA_PATTERN:-*.mrc})
mine=()
for ((i = index; i < ${#all[@]}; i += task_count)); do mine+=("${all[i]}"); done
echo "task $task_id ($((index + 1)) of $task_count): ${#mine[@]} of ${#all[@]} files"
printf '  %s\n' "${mine[@]##*/}"
if [[ ${#mine[@]} -eq 0 ]]; then exit 0; fi

# Kernels run on the CPUs Slurm gave this task, not on every core of the node.
threads="${SLURM_CPUS_PER_TASK:-$(nproc)}"
# numba's cache on node-local disk: compiled once per node, not on a shared file system. The
# image's own cache (compiled at build time) is read-only inside a .sif, so it is copied here.
cache="${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/noa-numba-$(id -u)"

if [[ -n "${NOA:-}" ]]; then
    mkdir -p "$cache"
    read -r -a noa <<<"$NOA"
    export NUMBA_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" NUMBA_CACHE_DIR="$cache"
else
    apptainer="${APPTAINER:-$(command -v apptainer || command -v singularity || true)}"
    [[ -n $apptainer ]] || die "neither apptainer nor singularity found (set APPTAINER, or NOA=noa for a local noa)"
    sif="${NOA_SIF:-$PWD/noa.sif}"
    [[ -f $sif ]] || die "no image $sif (set NOA_SIF)"
    if [[ ! -d $cache ]]; then
        # Seeded aside and renamed into place: tasks sharing a node never see a half-copied cache.
        seed="$(mktemp -d "$cache.XXXXXX")"
        "$apptainer" exec --cleanenv --bind "$seed" "$sif" cp -R /opt/noa-cache/. "$seed/" || true
        mv -T "$seed" "$cache" 2>/dev/null || rm -rf "$seed"
    fi
    mkdir -p "$cache"
    # --cleanenv keeps the host's Python variables out; what noa needs is passed explicitly.
    noa=("$apptainer" exec --cleanenv
        --bind "$in_dir:$in_dir:ro" --bind "$out_dir" --bind "$cache"
        --env "NUMBA_CACHE_DIR=$cache" --env "NUMBA_NUM_THREADS=$threads" --env "OMP_NUM_THREADS=$threads"
        "$sif" noa)
fi

exec "${noa[@]}" "${command[0]}" "${mine[@]}" --out-dir "$out_dir" --quiet "${command[@]:1}"
