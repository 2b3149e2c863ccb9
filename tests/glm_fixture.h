/* Settings that load an oracle fixture the way the tests of glm.c's internals need it (include
   after glm.c, which tests include with GLM_NO_MAIN): f32 weights and experts, every expert slot,
   the absorbed form with integer dots, the oracle's conventions (latent eps 1e-6, MTP zeroes e at
   position 0), a 1 GB budget, and no routing history from or into the user's cache directory. */
#ifndef GLM_FIXTURE_H
#define GLM_FIXTURE_H

static Settings fixture_settings(const char *dir, int batch) {
    Settings set;
    memset(&set, 0, sizeof set);
    set.model_dir = dir;
    set.indexer_mode = "auto";
    set.expert_bits = set.dense_bits = 16;
    set.cache_slots = 64;
    set.absorb = 1;
    set.idot = 1;
    set.batch = batch;
    set.latent_eps = 1e-6f;
    set.mtp_zero_pos0 = 1;
    set.ram_gb = 1;
    set.direct = -1;
    set.stats_path = "";
    set.usage = "off";
    set.cache_dir = "";
    return set;
}

#endif
