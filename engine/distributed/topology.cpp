#include "engine/distributed/topology.h"

#include <fmt/format.h>

#include "comm/mpi_env.h"
#include "engine/config/yaml.h"
#include "engine/core/error.h"

namespace shardrec {

void Topology::visit(FieldVisitor& v) {
    v.field(Field("compute_device", "where lookups run").one_of({"cpu", "cuda"}), compute_device);
    v.field(Field("local_size", "ranks (devices) per node").at_least(1), local_size);
    v.field(Field("device_memory_gib", "HBM per GPU, GiB")
                .greater_than(0)
                .only_if(compute_device == "cuda", "compute_device is cuda"),
            device_memory_gib);
    v.field(Field("host_memory_gib", "DDR per rank, GiB (the table memory of a cpu rank)")
                .greater_than(0),
            host_memory_gib);
    v.field(Field("device_memory_bw_gbps", "memory bandwidth of one rank's lookups, GB/s")
                .greater_than(0),
            device_memory_bw_gbps);
    v.field(Field("intra_node_bw_gbps", "per-rank bandwidth inside a node, GB/s").greater_than(0),
            intra_node_bw_gbps);
    v.field(Field("cross_node_bw_gbps", "per-rank bandwidth between nodes, GB/s").greater_than(0),
            cross_node_bw_gbps);
    v.field(Field("device_gflops", "dense compute rate of one rank, GFLOP/s").greater_than(0),
            device_gflops);
    v.field(Field("reserved_fraction", "memory kept out of the plan (activations, buffers)")
                .at_least(0)
                .less_than(1),
            reserved_fraction);
    v.field(Field("host_to_device_bw_gbps",
                  "what a GPU reads host memory at (fused_uvm lookups, PCIe), GB/s")
                .greater_than(0)
                .only_if(compute_device == "cuda", "compute_device is cuda"),
            host_to_device_bw_gbps);
    v.field(Field("disk_gib", "local disk per rank for key_value rows, GiB; 0: not checked")
                .at_least(0),
            disk_gib);
    v.field(Field("disk_bw_gbps", "random 4 KiB reads of the local disk, GB/s (key_value misses)")
                .greater_than(0),
            disk_bw_gbps);
}

PlacementEnv Topology::placement() const {
    PlacementEnv env;
    env.world_size = world_size;
    env.local_size = static_cast<int>(local_size);
    env.compute_device = compute_device;
    return env;
}

int64_t Topology::memory_limit_bytes() const {
    const double gib = compute_device == "cuda" ? device_memory_gib : host_memory_gib;
    return static_cast<int64_t>(gib * (1.0 - reserved_fraction) * 1073741824.0);
}

int64_t Topology::host_limit_bytes() const {
    if (compute_device != "cuda")
        return 0;
    return static_cast<int64_t>(host_memory_gib * (1.0 - reserved_fraction) * 1073741824.0);
}

int64_t Topology::disk_limit_bytes() const {
    return static_cast<int64_t>(disk_gib * 1073741824.0);
}

namespace {

// A world smaller than one node fills part of a node; otherwise nodes must be whole.
void fit_world(Topology& t, int world_size, ConfigNode* node) {
    SR_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
    t.world_size = world_size;
    if (t.local_size > world_size) {
        t.local_size = world_size;
    }
    if (world_size % t.local_size != 0) {
        const std::string message = fmt::format("{} ranks per node do not divide the world size {}",
                                                t.local_size, world_size);
        SR_CHECK(node != nullptr,
                 "{} in the built-in {} topology: give a topology whose local_size divides it "
                 "(plan --topology FILE, or sharding.topology; see configs/topologies/)",
                 message, t.compute_device);
        node->error_at("local_size", message);
    }
}

Topology read_topology(ConfigDocument& doc, int world_size) {
    Topology t;
    ConfigNode root = doc.root();
    read_fields(root, [&t](FieldVisitor& v) { t.visit(v); });
    doc.throw_if_errors();
    fit_world(t, world_size, &root);
    doc.throw_if_errors();
    return t;
}

}  // namespace

Topology load_topology(const std::string& path, int world_size) {
    ConfigDocument doc = ConfigDocument::parse_file(path, "the topology file");
    return read_topology(doc, world_size);
}

Topology parse_topology(const std::string& text, int world_size, const std::string& source_name) {
    ConfigDocument doc = ConfigDocument::parse_string(text, source_name);
    return read_topology(doc, world_size);
}

Topology default_topology(const std::string& compute_device, int world_size) {
    Topology t;
    if (compute_device == "cuda") {
        // One node of 8 H100 SXM: 80 GB HBM3 at 3.35 TB/s peak (~3 TB/s reached by lookups),
        // NVLink 4 at 450 GB/s per direction, one 400 Gb/s InfiniBand NIC per GPU, fp32 SIMT
        // GEMMs at ~50 of the 67 TFLOP/s peak.
        t.compute_device = "cuda";
        t.local_size = 8;
        t.device_memory_gib = 80.0;
        t.host_memory_gib = 256.0;
        t.device_memory_bw_gbps = 3000.0;
        t.intra_node_bw_gbps = 450.0;
        t.cross_node_bw_gbps = 50.0;
        t.device_gflops = 50000.0;
        t.reserved_fraction = 0.15;
        // Gen5 x16 host links (~64 GB/s peak); one 3.84 TB NVMe drive per GPU (DGX H100's 8),
        // ~1.5 M random 4 KiB reads/s.
        t.host_to_device_bw_gbps = 50.0;
        t.disk_gib = 3576.0;
        t.disk_bw_gbps = 6.0;
    } else {
        SR_CHECK(compute_device == "cpu", "no default topology for device '{}'", compute_device);
    }
    // For the running MPI world the nodes are the ones MPI found (its shared-memory split, or
    // SHARDREC_LOCAL_SIZE): any world size then fits, e.g. 3 ranks on one machine. A plan for
    // another world size (`shardrec plan --world-size N`) keeps the built-in node size.
    const comm::ProcessInfo& process = comm::process_info();
    if (process.world_size > 1 && world_size == process.world_size) {
        t.local_size = process.local_size;
    }
    fit_world(t, world_size, nullptr);
    return t;
}

Topology resolve_topology(const std::string& path,
                          const std::string& runtime_device,
                          int world_size) {
    if (!path.empty()) {
        return load_topology(path, world_size);
    }
    const bool cuda = runtime_device.compare(0, 4, "cuda") == 0;
    return default_topology(cuda ? "cuda" : "cpu", world_size);
}

std::string topology_to_yaml(const Topology& topology) {
    Topology copy = topology;
    YAML::Emitter out;
    out << write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
    return std::string(out.c_str()) + "\n";
}

}  // namespace shardrec
