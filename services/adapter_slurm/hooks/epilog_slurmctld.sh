#!/bin/bash
# Hylo push events: slurmctld's EpilogSlurmctld tells Hylo's Slurm adapter at once that a job ended,
# so that the adapter polls now and reports its outcome (and the freed nodes) without waiting for
# its next periodic poll (docs/slurm-adapter.md, "Push events"). deploy/slurm-dev/up installs it.
#
# Why EpilogSlurmctld and not a jobcomp plugin: Slurm allows one JobCompType, and the site's (here
# jobcomp/filetxt, which `sacct -c` reads) must stay. Why it cannot hold anything up: one UDP datagram
# by bash's own /dev/udp (no fork, no connection, an IP address so no name lookup), every error
# swallowed, exit status always 0. A lost datagram is repaired by the adapter's next poll.
#
# deploy/slurm-dev/up rewrites the three values below; on another cluster, set them by hand to the
# adapter's HYLO_SLURM_EVENTS_LISTEN address and HYLO_SLURM_CLUSTER.
HYLO_HOST=127.0.0.1
HYLO_PORT=6897
HYLO_CLUSTER=slurm-dev

if [[ "${SLURM_JOB_ID:-}" =~ ^[0-9]+$ ]]; then
  { printf 'hylo1 complete %s %s' "$HYLO_CLUSTER" "$SLURM_JOB_ID" >"/dev/udp/$HYLO_HOST/$HYLO_PORT"; } 2>/dev/null || true
fi
exit 0
