// The machine a plan is made for (TorchRec's planner Topology): how many ranks, how many share a
// node, the memory each rank may fill and the bandwidths and compute rate the planner's cost
// model divides by. Read from configs/topologies/*.yaml with the strict config reader (unknown
// keys and bad values are errors with file:line); the world size is not in the file, it comes
// from `--world-size` or the MPI world.
//
//   compute_device: cuda          # cpu | cuda
//   local_size: 8                 # ranks (GPUs) per node
//   device_memory_gib: 80         # HBM per GPU (cuda only)
//   host_memory_gib: 256          # DDR per rank (the embedding memory of a cpu rank)
//   device_memory_bw_gbps: 3000   # what lookups stream at, GB/s (1e9 B/s)
//   intra_node_bw_gbps: 450       # per rank, inside a node (NVLink; shared memory on cpu)
//   cross_node_bw_gbps: 50        # per rank, between nodes (400 Gb/s InfiniBand per GPU)
//   device_gflops: 50000          # dense fp32 rate per rank, GFLOP/s
//   reserved_fraction: 0.15       # memory kept out of the plan (activations, buffers, allocator)
//   host_to_device_bw_gbps: 50    # cuda: what fused_uvm lookups read host memory at (PCIe Gen5)
//   disk_gib: 3576                # local disk per rank for key_value rows; 0: not checked
//   disk_bw_gbps: 6.0             # random 4 KiB reads of that disk, GB/s (key_value misses)
//
// The tiers a plan fills per rank: the compute tier (HBM on cuda, DDR on cpu: fused rows, caches,
// buffers), DDR on cuda (fused_uvm rows, host_memory_gib less the reserve) and the disk
// (key_value rows once all are written, disk_gib whole).
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/fields.h"
#include "engine/distributed/sharding_types.h"

namespace shardrec {

struct Topology {
    int world_size = 1;  // set by the caller, not read from the file

    std::string compute_device = "cpu";
    int64_t local_size = 2;
    double device_memory_gib = 80.0;  // cuda only
    double host_memory_gib = 10.0;
    double device_memory_bw_gbps = 10.0;
    double intra_node_bw_gbps = 5.0;
    double cross_node_bw_gbps = 1.25;
    double device_gflops = 50.0;
    double reserved_fraction = 0.1;
    double host_to_device_bw_gbps = 50.0;  // cuda only
    double disk_gib = 0.0;                 // 0: the disk is not checked
    double disk_bw_gbps = 0.4;

    void visit(FieldVisitor& v);

    int num_nodes() const { return world_size / static_cast<int>(local_size); }

    PlacementEnv placement() const;
    // The memory the planner may fill on each rank: HBM on cuda, DDR on cpu, less the reserve.
    int64_t memory_limit_bytes() const;
    // DDR the planner may fill on a cuda rank (fused_uvm rows), less the reserve; 0 on cpu,
    // where DDR is the compute tier above.
    int64_t host_limit_bytes() const;
    // The disk the planner may fill on each rank; 0 when disk_gib is not given (not checked).
    int64_t disk_limit_bytes() const;

    // "HBM" or "DDR" (TorchRec ParameterStorage), for messages.
    const char* memory_kind() const { return compute_device == "cuda" ? "HBM" : "DDR"; }
};

// Reads a topology file for `world_size` ranks. A world smaller than one node makes a partial node
// (local_size = world_size); otherwise local_size must divide world_size. Throws Error listing
// every problem with file:line.
Topology load_topology(const std::string& path, int world_size);
Topology parse_topology(const std::string& text,
                        int world_size,
                        const std::string& source_name = "<string>");

// Built-in defaults: "cuda" gives one H100 node (configs/topologies/h100_8gpu_node.yaml),
// "cpu" this two-core machine class (configs/topologies/cpu_2rank.yaml).
// For the running MPI world (world_size == its size) the ranks per node are MPI's node split.
Topology default_topology(const std::string& compute_device, int world_size);

// `path` when given, else the default for a runtime.device ("cpu", "cuda", "cuda:N").
Topology resolve_topology(const std::string& path,
                          const std::string& runtime_device,
                          int world_size);

// The topology as YAML (every field; parses back to the same values).
std::string topology_to_yaml(const Topology& topology);

}  // namespace shardrec
