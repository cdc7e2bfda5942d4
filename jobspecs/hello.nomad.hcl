# The smallest caravan job: one task run by the caravan driver on one
# simulated or real NVIDIA GPU. Run it with:
#
#   nomad job run jobspecs/hello.nomad.hcl
#   nomad alloc logs <alloc-id> hello
job "hello" {
  type = "batch"

  group "hello" {
    # A batch job that fails should fail the test, not retry for minutes.
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "hello" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        # The caravan device plugin sets CUDA_VISIBLE_DEVICES to the UUID of
        # the GPU Nomad granted.
        args = ["-c", "echo hello from caravan on $CUDA_VISIBLE_DEVICES"]
      }

      resources {
        cpu    = 100
        memory = 64

        # Ask Nomad for one NVIDIA GPU of any model.
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
