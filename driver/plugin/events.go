package plugin

// This file holds task events, held for a recovered task until Nomad waits on it.

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/drivers/shared/eventer"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/task"
)

// emit sends a task event that Nomad shows in `nomad alloc status`.
func (d *Driver) emit(h *task.Handle, msg string, annotations map[string]string, err error) {
	ev := &drivers.TaskEvent{
		TaskID: h.Config.ID, AllocID: h.Config.AllocID, TaskName: h.Config.Name,
		Timestamp: time.Now(), Message: msg, Annotations: annotations, Err: err,
	}
	h.Logger.Info(msg)
	if held, ok := d.recoveryEvents.Load(h.Config.ID); ok {
		held.(*heldEvents).add(ev, d.eventer, h.Logger)
		return
	}
	sendEvent(d.eventer, ev, h.Logger)
}

func sendEvent(e *eventer.Eventer, ev *drivers.TaskEvent, logger hclog.Logger) {
	if err := e.EmitEvent(ev); err != nil {
		logger.Warn("task event dropped", "error", err, "message", ev.Message)
	}
}

// heldEvents are a recovered task's events, held until Nomad waits on the
// task and then sent in order. Every later event of the task goes through
// it too, so that none overtakes the held ones.
type heldEvents struct {
	mu       sync.Mutex
	events   []*drivers.TaskEvent
	released bool
}

func (he *heldEvents) add(ev *drivers.TaskEvent, e *eventer.Eventer, logger hclog.Logger) {
	he.mu.Lock()
	defer he.mu.Unlock()
	if !he.released {
		he.events = append(he.events, ev)
		return
	}
	sendEvent(e, ev, logger)
}

func (he *heldEvents) release(e *eventer.Eventer, logger hclog.Logger) {
	he.mu.Lock()
	defer he.mu.Unlock()
	if he.released {
		return
	}
	he.released = true
	for _, ev := range he.events {
		sendEvent(e, ev, logger)
	}
	he.events = nil
}
