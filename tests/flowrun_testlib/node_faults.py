"""The faults the stand-in NVML (tests/fixtures/gpu/fake_nvml.cpp, FAKE_NVML_FAULTS) gives a node, and the
words of the node check that leaves the node out for each, as the head prints them."""


def node_faults(gpus):
    """{kind: (FAKE_NVML_FAULTS, the check's words)} for a node of the 4 GPUs of FAKE_NVML_SCENARIO=bridges
    whose plan expects `gpus` of them: an uncorrectable ECC error on GPU 1, a busy GPU 0, and 3 GPUs missing."""
    return {
        "ecc": ("ecc:1", "gpu_health: GPU 1 has 1 uncorrectable ECC error: reset it (nvidia-smi -r) or drain the node"),
        "busy": ("busy:0", "gpu_health: GPU 0 is busy: 1 process already runs on it (another job, or one left "
                           "behind): end it, or leave the node out"),
        "missing": ("missing:3",
                    f"gpu_count: NVML reports 1 GPU where the plan expects {gpus}; a GPU is missing (fell off the "
                    "bus, or disabled): check nvidia-smi on the node, or leave it out"),
    }
