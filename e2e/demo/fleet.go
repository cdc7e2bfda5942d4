package main

// demoFleet is a heterogeneous fleet: H100s cut into lanes beside whole A100s
// and T4s.
const demoFleet = `{
  "driver_version": "550.54.15",
  "cuda_version": "12.4",
  "gpus": [
    {"uuid": "GPU-h100", "count": 2, "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
     "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132, "pci_bandwidth_mbps": 63015},
    {"uuid": "GPU-a100", "count": 2, "model": "NVIDIA A100-SXM4-40GB", "architecture": "ampere",
     "compute_capability": "8.0", "memory_mib": 40960, "sm_count": 108, "pci_bandwidth_mbps": 31507},
    {"uuid": "GPU-t4", "count": 4, "model": "Tesla T4", "architecture": "turing",
     "compute_capability": "7.5", "memory_mib": 15360, "sm_count": 40, "pci_bandwidth_mbps": 15753}
  ]
}`

// demoPartitions cuts each H100 into four lanes; other GPUs stay whole.
const demoPartitions = `
    partition {
      model           = "*H100*"
      lanes           = 4
      reserved_memory = "1GiB"
      slots           = 2
    }
`
