// container.h: running each rank inside a container image (gpurun --container). apptainer and
// podman wrap the rank's program inside the rank wrapper, so the wrapper (control socket,
// heartbeat, signals, output) stays on the host; pyxis instead puts the whole srun task, wrapper
// included, in the image through srun's --container-* flags. Pure: tool lookups are injected.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpurun::launcher {

enum class ContainerRuntime { apptainer, podman, pyxis };
const char* to_string(ContainerRuntime r);

struct ContainerSpec {
  ContainerRuntime runtime = ContainerRuntime::apptainer;
  std::string image;
};

// --container-runtime NAME (auto|apptainer|podman|pyxis). auto: pyxis when `srun_pyxis` (the
// launch goes through an srun that has --container-image), else apptainer, then podman, by
// `find_tool`; throws Error naming what was looked for when none is there.
ContainerRuntime pick_container_runtime(
    const std::string& name, bool srun_pyxis,
    const std::function<std::optional<std::string>(const std::string&)>& find_tool);

// What the runtime needs to start one rank's program inside the image.
struct ContainerRank {
  std::vector<std::pair<std::string, std::string>> env;  // passed into the container
  std::vector<std::string> binds;  // host folders mounted at the same path (the rank's folder)
  std::string workdir;             // the rank's working folder, mounted and entered
};

// The command that runs `program` for one rank (apptainer or podman). podman gets exactly the
// GPUs named in the rank's CUDA_VISIBLE_DEVICES as CDI devices (nvidia.com/gpu=ID), which the
// container then sees as 0..n-1; apptainer --nv sees the node's GPUs and the rank's
// CUDA_VISIBLE_DEVICES selects among them.
std::vector<std::string> container_argv(const ContainerSpec& c, const ContainerRank& r,
                                        const std::vector<std::string>& program);

// srun's pyxis flags: the image, the working folder mounted and entered.
std::vector<std::string> pyxis_srun_flags(const std::string& image, const std::string& workdir);

// Besides the rank's own variables (rank_environment()), which of the wrapper's environment goes
// into a podman/apptainer container: GPURUN_* (heartbeat, restart count), NCCL_* settings, and the
// MPI engine's OMPI_*/PMIX_*/PMI_* wire-up.
bool passed_into_container(const std::string& key);

}  // namespace gpurun::launcher
