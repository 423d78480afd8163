"""Health checks: one module per check; gather touches probes, judge is pure.

Registered in :mod:`.registry` (name -> "module:Class", phases); run by
:mod:`slurm_hooks.detect.runner`.  Every result is a :class:`~slurm_hooks.core.model.Finding`
with a stable code.  Codes and recommended actions of the checks here, each
row a :class:`~.base.Problem` declared in its check's module (a test holds
the two together):

=================  =========  ====================  ===========  ==========================================
check              status     code                  action       when
=================  =========  ====================  ===========  ==========================================
gpu_count          FAIL       NVML_INIT             reboot       nvmlInit: DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH
gpu_count          FAIL       NVML_INIT             drain        nvmlInit fails otherwise (library missing ...)
gpu_count          FAIL       GPU_COUNT             reboot       fewer GPUs than profile ``gpu_count``
gpu_count          WARN       GPU_COUNT             none         more GPUs than the profile: wrong profile?
gpu_count          WARN       GPU_MODEL             none         name lacks profile ``gpu_model``
gpu_lost           FAIL       GPU_LOST              reboot       GPU_IS_LOST or UNKNOWN from NVML (XID 79); replace if recurring
gpu_lost           FAIL       GPU_RESET_REQUIRED    reset_gpu    NVML_ERROR_RESET_REQUIRED
ecc                FAIL       ECC_DBE               reset_gpu    volatile uncorrectable ECC > max_volatile_uncorrected (0)
ecc                WARN       ECC_DBE_AGGREGATE     drain        lifetime uncorrectable > max_aggregate_uncorrected (if set)
retired_pages      FAIL       RETIRED_PAGES_PENDING reset_gpu    pages pending retirement (NOT_SUPPORTED on A100+: n/a)
row_remap          FAIL       ROW_REMAP_FAILED      replace      failureOccurred
row_remap          FAIL       ROW_REMAP_PENDING     reset_gpu    isPending
pcie               FAIL       PCIE_DOWNTRAINED      drain        width < max/profile, or max gen < profile ``pcie_gen``
pcie               WARN       PCIE_DOWNTRAINED      none         busy (not idle) GPU below max gen (setting gen_below_max)
nvlink             FAIL       NVLINK_DOWN           reset_gpu    a link down, or expected links not reported
nvlink             WARN       NVLINK_ERRORS         drain        replay/CRC/recovery counters rose since last run
throttle           FAIL       GPU_THROTTLE          drain        hw_slowdown, hw_thermal, hw_power_brake active
throttle           WARN       GPU_THROTTLE          none         sw_thermal active
gpu_temp           FAIL/WARN  GPU_TEMP              drain/none   >= gpu_temp_fail_c / gpu_temp_warn_c
gpu_memory         FAIL       GPU_MEMORY_HELD       reset_gpu    >= held_mib in use, no process, at 2 looks
driver             FAIL       DRIVER_VERSION        drain        not ``driver_version`` (prefix) or below ``driver_min_version``
persistence        WARN       PERSISTENCE_MODE      none         persistence mode off
fabric             FAIL       FABRIC_MANAGER        drain        state not_started, status != SUCCESS, health unhealthy
fabric             WARN       FABRIC_MANAGER        none         state in_progress, health limited_capacity
ib                 FAIL       IB_PORT_DOWN          drain        port not ACTIVE/LinkUp
ib                 FAIL       IB_RATE               drain        rate below profile ``ib.rate_gbps``
ib                 FAIL       IB_PORT_MISSING       drain        named port absent, or fewer than ``ib.count`` ports
memory             FAIL       MEMORY_SIZE           drain        RAM < ``memory_gb`` - tolerance_pct (5 %)
mounts             FAIL       MOUNT_MISSING         drain        not in the mount table
mounts             FAIL       MOUNT_READONLY        drain        mounted ro
mounts             FAIL       MOUNT_HUNG            drain        write test timed out (jobs kept: users' I/O can do it)
mounts             FAIL       MOUNT_NOT_WRITABLE    drain        write test failed
mounts             FAIL       MOUNT_FULL            drain        no space or inodes left (jobs kept: users can fill it)
scratch            FAIL       SCRATCH_FULL          drain        free < ``scratch_min_free_gb``
scratch            FAIL       SCRATCH_MISSING       drain        scratch path missing
(runner)           UNKNOWN    CHECK_UNKNOWN         none         could not gather (NVML error on a GPU, ...)
(runner)           UNKNOWN    CHECK_TIMEOUT         none         ran past its timeout
(runner)           UNKNOWN    CHECK_BUDGET          none         skipped: phase budget spent
(runner)           UNKNOWN    CHECK_ERROR           none         the check crashed (a bug)
(runner)           UNKNOWN    CHECK_NOT_INSTALLED   none         the check's module is not installed
(runner)           UNKNOWN    CONFIG_ERROR          none         its ``[checks.<name>]`` table is invalid
=================  =========  ====================  ===========  ==========================================

A GPU NVML cannot reach is reported once, as FAIL by ``gpu_lost``; the
other GPU checks say UNKNOWN for that GPU and still judge the others.
"""
