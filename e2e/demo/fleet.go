package main

// demoPartitions cuts each H100 of the harness's default fleet (H100s, A100s
// and T4s) into four lanes; the other GPUs stay whole.
const demoPartitions = `
    partition {
      model           = "*H100*"
      lanes           = 4
      reserved_memory = "1GiB"
      slots           = 2
    }
`
