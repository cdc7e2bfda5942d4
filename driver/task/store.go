package task

import "sync"

// Store maps Nomad task IDs to their handles.
type Store struct {
	mu    sync.RWMutex
	tasks map[string]*Handle
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{tasks: map[string]*Handle{}} }

// Set records h under id.
func (s *Store) Set(id string, h *Handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[id] = h
}

// Get returns the handle stored under id.
func (s *Store) Get(id string) (*Handle, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.tasks[id]
	return h, ok
}

// Delete forgets id.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
}

// All returns every stored handle.
func (s *Store) All() []*Handle {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Handle, 0, len(s.tasks))
	for _, h := range s.tasks {
		out = append(out, h)
	}
	return out
}
