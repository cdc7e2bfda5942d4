// Package planner is caravan's scheduler: the policies, the live planner
// that carries them out on Nomad, and the simulator that runs them on a
// trace. Its packages sit on two paths that share one step, the policy.
//
// The live path, one round after another (service runs it):
//
//	nomadx      read Nomad: nodes, jobs, allocations, the event stream
//	cluster     Nomad's objects as the cluster: GPU groups, lanes, jobs
//	policy      the snapshot in, decisions out (a pure function)
//	enact       the decisions as Nomad changes, in phases (pure)
//	target      what a change wants a job to look like (plain data)
//	rewrite     the jobspec edits that reach a target, and the writer that
//	            registers them safely
//	service     the round, leadership through Consul (consulx), the HTTP
//	            API (plannerapi) and the dashboard
//
// The offline path, from a trace to figures:
//
//	trace       job traces, cluster specs, throughput tables
//	profile     the per-model throughputs jobs are profiled with
//	sim         the discrete-event simulator, calling policy as the live
//	            planner does
//	simout      the output folders of caravan sim -out
//	plot        the charts
//	replay      a trace played on a real Nomad under the live planner,
//	            and the costs a live run is measured by, for the simulator
//
// command holds the CLI that runs either path.
package planner
