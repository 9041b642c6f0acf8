--[[
Hylo push events: slurmctld's job_submit/lua hook tells Hylo's Slurm adapter at once that a job is
being submitted, so that the adapter polls squeue now instead of at its next periodic poll
(docs/slurm-adapter.md, "Push events"). Install it as job_submit.lua beside slurm.conf with
JobSubmitPlugins=lua (deploy/slurm-dev/up does both).

Why it is this small, and why it can never block or reject a submission:
- it runs inside slurmctld, under its locks, before the job has an id: it only sends one UDP
  datagram, in-process (lua-socket), non-blocking (settimeout(0)), to an IP address (no name
  lookup), and never forks; a datagram nobody receives is simply lost;
- every step runs under pcall and the function always returns slurm.SUCCESS, whatever happens;
- without lua-socket it sends nothing (said once in slurmctld's log): Hylo then learns of the job
  at its next poll, as it does of any event that is lost (polling stays the reconciliation).
It does not touch job_desc, and job modifications send nothing (Hylo's own priority updates are
modifications: notifying them would make the adapter poll after each of its own writes).

deploy/slurm-dev/up rewrites the three values below; on another cluster, set them by hand to the
adapter's HYLO_SLURM_EVENTS_LISTEN address and HYLO_SLURM_CLUSTER.
]]

local HYLO_HOST = "127.0.0.1"
local HYLO_PORT = 6897
local HYLO_CLUSTER = "slurm-dev"

local have_socket, socket = pcall(require, "socket")
if not have_socket then
	slurm.log_info("hylo push events: lua-socket is not installed; Hylo learns of jobs by polling only")
end
local udp = nil

local function notify(kind)
	if not have_socket then
		return
	end
	if udp == nil then
		udp = socket.udp()
		if udp == nil then
			return
		end
		udp:settimeout(0)
	end
	udp:sendto("hylo1 " .. kind .. " " .. HYLO_CLUSTER, HYLO_HOST, HYLO_PORT)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, err = pcall(notify, "submit")
	if not ok then
		pcall(slurm.log_error, "hylo push events: %s", tostring(err))
		udp = nil
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
