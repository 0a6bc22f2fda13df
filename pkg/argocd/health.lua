-- Argo CD health of a vmoperator.jdrupes.org/v1 VirtualMachine, from the
-- status that vm-operator (Running, Ready, RestartRequired, Failed) and
-- vm-runner (MediaLoaded) write. Conditions follow the Kubernetes
-- conventions (type, status, reason, message); status.observedGeneration
-- is the generation the operator last acted on.
--
-- Argo CD runs scripts from argocd-cm without the Lua standard libraries
-- (only base, table and package), so this one uses no string functions.

local function condition(type)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

-- say puts a condition into words: what its reason (or head) says, then
-- its message.
local function say(c, head)
  head = head or c.reason or c.type
  if c.message == nil or c.message == "" then
    return head .. "."
  end
  return head .. ": " .. c.message
end

local hs = {}

-- Status of an older spec says nothing about the current one: after a sync
-- the health must not flap to the old state.
local generation = obj.metadata.generation or 0
-- The CRD defaults observedGeneration to 0 until the operator writes it.
if obj.status == nil or obj.status.observedGeneration == nil or obj.status.observedGeneration == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for vm-operator to report the VM's status."
  return hs
end
if obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for vm-operator to act on generation " .. generation
    .. " of the spec (the status is of generation " .. obj.status.observedGeneration .. ")."
  return hs
end

-- A spec the operator cannot render or apply, a pod that cannot be
-- created, a runner that keeps failing: none of them heals by waiting.
local failed = condition("Failed")
if failed ~= nil and failed.status == "True" then
  hs.status = "Degraded"
  hs.message = say(failed)
  return hs
end

local running = condition("Running")
if running == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for vm-operator to report the VM's state."
  return hs
end

-- The Running condition's reason is the VM's phase: Running or Stopped
-- when it is where the spec wants it, Starting or Stopping on the way.
-- spec.vm.state defaults to Stopped.
local want = "Stopped"
if obj.spec ~= nil and obj.spec.vm ~= nil and obj.spec.vm.state == "Running" then
  want = "Running"
end
if running.reason ~= want then
  hs.status = "Progressing"
  hs.message = say(running, tostring(running.reason) .. " (spec.vm.state is " .. want .. ")")
  return hs
end
if want == "Stopped" then
  hs.status = "Healthy"
  hs.message = say(running)
  return hs
end

-- Running as asked, but a CD drive lacks the medium the spec names (the
-- image cannot be opened): the VM runs, but not as asked, and the runner
-- only retries when the field changes. Like a pod whose image cannot be
-- pulled, it needs someone to fix the spec or the image: Degraded.
local media = condition("MediaLoaded")
if media ~= nil and media.status == "False" and media.reason == "MediumUnavailable" then
  hs.status = "Degraded"
  hs.message = say(media)
  return hs
end

-- The pod runs but its runner does not report the VM ready (yet).
local ready = condition("Ready")
if ready ~= nil and ready.status == "False" then
  hs.status = "Progressing"
  hs.message = say(ready, "Not ready")
  return hs
end

-- A spec change that applies only at the next start (RestartRequired), or a
-- CD change that waits for the guest to release the tray (MediaLoaded
-- WaitingForTray). Not Healthy: Argo CD shows the app Synced, so the health
-- is the only place that tells that what Git says is not in effect. Not
-- Progressing: it does not progress by itself, since the operator never
-- restarts a running VM. Not Degraded: the VM works. Suspended is Argo CD's
-- word for a resource that waits for someone (as a paused Deployment whose
-- new template waits for a resume); like one, it holds up later sync waves.
local restart = condition("RestartRequired")
if restart ~= nil and restart.status == "True" then
  hs.status = "Suspended"
  hs.message = say(restart, "Restart required")
  return hs
end
if media ~= nil and media.status == "False" then
  hs.status = "Suspended"
  hs.message = say(media)
  return hs
end

-- Booted (the guest agent answers) is not asked for: many guests run no
-- agent. SpecWarnings neither: the VM runs as the spec is rendered, and
-- kubectl vm status shows the warnings.
hs.status = "Healthy"
hs.message = say(running)
return hs
