// Package plannerapi is the planner's HTTP API: the JSON types it serves and
// a small client the operator CLI uses.
package plannerapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
)

// Status is GET /v1/status.
type Status struct {
	ID         string `json:"id"`
	Version    string `json:"version"`
	Leader     bool   `json:"leader"`
	LeaderAddr string `json:"leader_address,omitempty"`
	NomadAddr  string `json:"nomad_address"`
	Consul     bool   `json:"consul"`
	// Preemption is what Nomad's scheduler configuration allows.
	Preemption Preemption `json:"preemption"`
	Warnings   []string   `json:"warnings,omitempty"`
	Rounds     int64      `json:"rounds"`
	LastRound  *Round     `json:"last_round,omitempty"`
	Policy     string     `json:"policy"`
	// Interval is planning.interval: the planner plans at least this
	// often, whether or not anything happened.
	Interval time.Duration `json:"interval_ns,omitempty"`
}

// Preemption mirrors Nomad's PreemptionConfig.
type Preemption struct {
	Checked bool `json:"checked"`
	Batch   bool `json:"batch"`
	Service bool `json:"service"`
	System  bool `json:"system"`
}

// Round summarises one planning round.
type Round struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	Jobs     int           `json:"jobs"`
	// Planned says the round ran the policy; otherwise it carried out the
	// last plan (no job arrived or completed, and the policy's wake-up
	// time had not come).
	Planned bool `json:"planned"`
	// Bound, for a round that ran a policy ordering by a relaxation
	// (hare), is the relaxation's lower bound on the total weighted
	// completion time, in seconds from the round, of the jobs whose run
	// time it knows.
	Bound     float64 `json:"weighted_completion_bound,omitempty"`
	Writes    int     `json:"writes"`
	Conflicts int     `json:"conflicts"`
	Failures  int     `json:"failures"`
	Error     string  `json:"error,omitempty"`
}

// QueueEntry is one managed job in GET /v1/queue, in rank order.
type QueueEntry struct {
	Namespace string  `json:"namespace"`
	Job       string  `json:"job"`
	Group     string  `json:"group,omitempty"` // the team or user: caravan.group, else the namespace
	Policy    string  `json:"policy"`
	State     string  `json:"state"` // pending or running
	Rank      int     `json:"rank"`
	Queue     int     `json:"queue"`
	Band      int     `json:"band"`
	Priority  int     `json:"priority"`
	GPUs      int     `json:"gpus"`
	Attained  float64 `json:"attained_gpu_seconds"`
	Executed  float64 `json:"executed_seconds"`
	Waiting   float64 `json:"waiting_seconds"`
	Run       bool    `json:"run"`
	GPUModel  string  `json:"planned_gpu_model,omitempty"`
	Lane      bool    `json:"lane,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	MemoryGB  float64 `json:"memory_gb,omitempty"`
	Reason    string  `json:"reason"`
}

// Queue is GET /v1/queue: the jobs of the page asked for, every job when
// none was.
type Queue struct {
	Leader bool         `json:"leader"`
	Time   time.Time    `json:"time"`
	Jobs   []QueueEntry `json:"jobs"`
	// Total is how many jobs match the filter (all of them without one),
	// Running how many of those run; Offset and Limit are the page applied
	// (Limit 0: no limit).
	Total   int `json:"total"`
	Running int `json:"running"`
	Offset  int `json:"offset"`
	Limit   int `json:"limit"`
}

// Record is one decision the planner applied, or tried to.
type Record struct {
	Time      time.Time `json:"time"`
	Priority  int       `json:"priority"`
	Changes   []string  `json:"changes,omitempty"`
	Outcome   string    `json:"outcome"`
	Conflicts int       `json:"conflicts,omitempty"`
	Reason    string    `json:"reason"`
	Error     string    `json:"error,omitempty"`
}

// Explain is GET /v1/explain/<job>.
type Explain struct {
	QueueEntry
	// Placement says why the job may or may not have its placement changed.
	Placement string `json:"placement"`
	// History holds the latest applied decisions, newest last.
	History []Record `json:"history"`
}

// TokenEnv is the environment variable holding the API token: the
// planner's when its http.token is empty, and the CLI's when its
// -planner-token flag is.
const TokenEnv = "CARAVAN_PLANNER_TOKEN"

// TokenHeader carries the API token, as does "Authorization: Bearer".
const TokenHeader = "X-Caravan-Token"

// Client talks to a planner's HTTP API.
type Client struct {
	Address string
	// Token is sent as a bearer token when set.
	Token string
	HTTP  *http.Client
}

// NewClient returns a client for address ("host:port" or a URL) that sends
// token, if any.
func NewClient(address, token string) *Client {
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	return &Client{Address: strings.TrimRight(address, "/"), Token: token, HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// NotFoundError is returned for a 404 answer.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// AuthError is returned when the planner refuses the request's token: 401
// when none was sent, 403 when it was wrong.
type AuthError struct {
	Address string
	Code    int
	Msg     string
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("planner at %s: %d %s: %s", e.Address, e.Code, http.StatusText(e.Code), e.Msg)
}

// Error is the JSON body of an error answer.
type Error struct {
	Error string `json:"error"`
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Address+path, nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("planner at %s: %w", c.Address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return &NotFoundError{Msg: strings.TrimSpace(string(body))}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		msg := strings.TrimSpace(string(body))
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &AuthError{Address: c.Address, Code: resp.StatusCode, Msg: msg}
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("planner at %s: %s: %s", c.Address, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
}

// Status reads /v1/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.get(ctx, "/v1/status", &s)
}

// Queue reads /v1/queue.
func (c *Client) Queue(ctx context.Context) (*Queue, error) {
	var q Queue
	return &q, c.get(ctx, "/v1/queue", &q)
}

// Explain reads /v1/explain/<job>; job may be "namespace/id" or an id in the
// default namespace.
func (c *Client) Explain(ctx context.Context, job string) (*Explain, error) {
	var e Explain
	return &e, c.get(ctx, "/v1/explain/"+url.PathEscape(job), &e)
}

// Decisions reads /v1/decisions: up to limit recent writes (the planner's
// bound when limit is 0), newest first.
func (c *Client) Decisions(ctx context.Context, limit int) (*Decisions, error) {
	path := "/v1/decisions"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var d Decisions
	return &d, c.get(ctx, path, &d)
}

// GPUMap is GET /v1/gpus: every GPU device instance with the job holding
// it, as of the latest round.
type GPUMap struct {
	Time  time.Time      `json:"time"`
	Lanes []cluster.Lane `json:"lanes"`
	// GPUs is the number of physical GPUs, Busy how many of them jobs hold
	// (a lane counting as its share).
	GPUs int     `json:"gpus"`
	Busy float64 `json:"busy_gpus"`
	// StatsError says why GPU memory in use could not be read, if so.
	StatsError string `json:"stats_error,omitempty"`
}

// Decision is one write the planner made to Nomad, tried to make, or that
// a user edit overrode, in GET /v1/decisions: the job's Record with the job
// and the action.
type Decision struct {
	Record
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	// Action is the change layer's action: start, hold, preempt, place,
	// priority, migrate or restore.
	Action string `json:"action,omitempty"`
	// Override says how a user's edit overrode or raced the write.
	Override string `json:"override,omitempty"`
}

// Decisions is GET /v1/decisions, newest first.
type Decisions struct {
	Decisions []Decision `json:"decisions"`
}

// Results is GET /v1/results: the live cluster's completions and GPU
// utilisation since the planner started, and the output folders the
// dashboard can draw.
type Results struct {
	Since     time.Time `json:"since"`
	Completed int       `json:"completed_jobs"`
	MeanJCT   float64   `json:"mean_jct_seconds"`
	MedianJCT float64   `json:"median_jct_seconds"`
	GPUs      int       `json:"gpus"`
	Busy      float64   `json:"busy_gpus"`
	// Utilization is busy GPU-seconds over GPU-seconds since Since.
	Utilization float64 `json:"gpu_utilization"`
	// Folders are the caravan sim / replay output folders under the
	// configured ui.results_dir.
	Folders []string `json:"folders"`
}
