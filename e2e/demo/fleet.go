package main

// demoPartitions cuts each H100 of the harness's default fleet (H100s, A100s
// and T4s) into four lanes; the other GPUs stay whole. One slot per lane
// keeps the fleet at 14 instances, so that 14 jobs make every GPU busy.
const demoPartitions = `
    partition {
      model           = "*H100*"
      lanes           = 4
      reserved_memory = "1GiB"
    }
`
