/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.c - the one list of protocols: each one's number, name (and
 * the other names it goes by) and ops table, and through the table its
 * traits.  The engine's options, the simulator's and every log line take
 * their names from here, and the engine and the simulator learn what a
 * protocol asks of them from its traits (kn__sync_traits), so a new
 * protocol is its own file, its ops table's declaration and one row here,
 * and its number in kanel.h's enum kn_sync (ABI, the one enum that names
 * a protocol), which is also the row's index.
 */
#include <errno.h>
#include <string.h>

#include "kanel.h"
#include "sync_priv.h"

/* The protocols' ops tables, each defined in the protocol's own file. */
extern const struct kn__sync_ops kn__sync_bsp_ops;
extern const struct kn__sync_ops kn__sync_asp_ops;
extern const struct kn__sync_ops kn__sync_ssp_ops;
extern const struct kn__sync_ops kn__sync_esp_ops;
extern const struct kn__sync_ops kn__sync_predicted_ops;
extern const struct kn__sync_ops kn__sync_cgp_ops;

/* Indexed by enum kn_sync. */
static const struct protocol {
	const char *name;  /* the one printed */
	const char *alias; /* another name parsed as this one, or NULL */
	const struct kn__sync_ops *ops;
} registry[] = {
	[KN_SYNC_BSP] = { "bsp", NULL, &kn__sync_bsp_ops },
	[KN_SYNC_ASP] = { "asp", NULL, &kn__sync_asp_ops },
	[KN_SYNC_SSP] = { "ssp", NULL, &kn__sync_ssp_ops },
	[KN_SYNC_ESP] = { "esp", NULL, &kn__sync_esp_ops },
	/* psp: the theses' name for it */
	[KN_SYNC_PSP] = { "predicted", "psp", &kn__sync_predicted_ops },
	[KN_SYNC_CGP] = { "cgp", NULL, &kn__sync_cgp_ops },
};

#define NPROTOCOLS (sizeof(registry) / sizeof(registry[0]))

const struct kn__sync_ops *kn__sync_ops_of(uint32_t protocol)
{
	return protocol < NPROTOCOLS ? registry[protocol].ops : NULL;
}

const char *kn__sync_protocol_name(uint32_t protocol)
{
	return protocol < NPROTOCOLS ? registry[protocol].name : NULL;
}

const struct kn__sync_traits *kn__sync_traits(uint32_t protocol)
{
	static const struct kn__sync_traits none;

	return protocol < NPROTOCOLS ? &registry[protocol].ops->traits : &none;
}

int kn__sync_protocol_parse(const char *name)
{
	if (!name)
		return -EINVAL;
	for (uint32_t p = 0; p < NPROTOCOLS; p++)
		if (strcmp(registry[p].name, name) == 0 ||
		    (registry[p].alias && strcmp(registry[p].alias, name) == 0))
			return (int)p;
	return -EINVAL;
}

const char *kn__sync_protocol_name_at(uint32_t i, uint32_t *protocol)
{
	for (uint32_t p = 0; p < NPROTOCOLS; p++) {
		if (i == 0 || (i == 1 && registry[p].alias)) {
			*protocol = p;
			return i ? registry[p].alias : registry[p].name;
		}
		i -= registry[p].alias ? 2 : 1;
	}
	return NULL;
}

const char *kn_sync_name(enum kn_sync protocol)
{
	return kn__sync_protocol_name((uint32_t)protocol);
}

const char *kn_sync_name_at(unsigned int i, enum kn_sync *protocol)
{
	uint32_t p;
	const char *name;

	if (!protocol)
		return NULL;
	name = kn__sync_protocol_name_at(i, &p);
	if (name)
		*protocol = (enum kn_sync)p;
	return name;
}
