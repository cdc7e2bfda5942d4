package service

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// A burst of changes is read whole: settle returns only once the burst has
// ended, not at its first change.
func TestSettleWaitsForABurstToEnd(t *testing.T) {
	changes := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		changes <- struct{}{}
		for n = 1; n < 40; n++ {
			// The pause before each change, so that the count follows the
			// last change at once.
			time.Sleep(5 * time.Millisecond)
			changes <- struct{}{}
		}
		sent <- n
	}()
	<-changes // the change that woke the loop
	_, err := settle(context.Background(), changes, 100*time.Millisecond, time.Minute)
	must.NoError(t, err)
	select {
	case n := <-sent:
		must.Eq(t, 40, n)
	default:
		t.Fatal("settle returned while the burst was still arriving")
	}
}

// Changes that never stop hold the round back no longer than the limit.
func TestSettleStopsAtTheLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan struct{})
	go func() {
		for {
			select {
			case changes <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := settle(ctx, changes, time.Hour, 50*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		must.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("settle never returned under a stream of changes")
	}
}

// A closed stream ends the wait and is reported as nil; a cancelled
// context ends it with the context's error; quiet 0 does not wait.
func TestSettleEnds(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	got, err := settle(context.Background(), closed, time.Hour, time.Hour)
	must.NoError(t, err)
	must.Nil(t, got)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = settle(ctx, make(chan struct{}), time.Hour, time.Hour)
	must.ErrorIs(t, err, context.Canceled)

	open := make(chan struct{})
	got, err = settle(context.Background(), open, 0, time.Hour)
	must.NoError(t, err)
	must.NotNil(t, got)
}
