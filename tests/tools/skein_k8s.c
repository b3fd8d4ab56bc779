/* tests/tools/skein_k8s: reads a Kubernetes manifest (libyaml, the library
 * skeind links for job files) and prints what tests/deploy/kubernetes_test.sh
 * needs to start an agent exactly as the kubelet would:
 *
 *   skein_k8s FILE KIND NAME args        the first container's args, one a line
 *   skein_k8s FILE KIND NAME command     its command, one a line
 *   skein_k8s FILE KIND NAME env         NAME=value, NAME=@field:PATH, NAME=@secret:NAME/KEY
 *   skein_k8s FILE KIND NAME ready|live  the readiness / liveness probe's exec command
 *   skein_k8s FILE KIND NAME mounts      MOUNTPATH=hostpath:PATH | secret:NAME
 *   skein_k8s FILE KIND NAME labels      the pod template's labels, K=V
 *   skein_k8s FILE Service NAME selector the Service's selector, K=V
 *
 * Exit 1 with a message when the file does not parse or has no such object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static yaml_document_t *g_doc;

static yaml_node_t *get(yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE) return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(g_doc, p->key);
		if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
			return yaml_document_get_node(g_doc, p->value);
	}
	return NULL;
}

/* "a.b.c" through mappings */
static yaml_node_t *path(yaml_node_t *n, const char *p)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", p);
	for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && n; k = strtok_r(NULL, ".", &save)) n = get(n, k);
	return n;
}

static const char *str(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *item(yaml_node_t *seq, size_t i)
{
	if (!seq || seq->type != YAML_SEQUENCE_NODE) return NULL;
	yaml_node_item_t *it = seq->data.sequence.items.start + i;
	return it < seq->data.sequence.items.top ? yaml_document_get_node(g_doc, *it) : NULL;
}

static void print_seq(yaml_node_t *seq)
{
	for (size_t i = 0; item(seq, i); i++) printf("%s\n", str(item(seq, i)) ? str(item(seq, i)) : "");
}

static void print_map(yaml_node_t *map)
{
	if (!map || map->type != YAML_MAPPING_NODE) return;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
		printf("%s=%s\n", str(yaml_document_get_node(g_doc, p->key)), str(yaml_document_get_node(g_doc, p->value)));
}

static int field(yaml_node_t *root, const char *kind, const char *what)
{
	if (!strcmp(kind, "Service")) {
		if (strcmp(what, "selector")) return -1;
		print_map(path(root, "spec.selector"));
		return 0;
	}
	yaml_node_t *pod = path(root, "spec.template.spec"), *c = item(get(pod, "containers"), 0);
	if (!c) return -1;
	if (!strcmp(what, "args")) print_seq(get(c, "args"));
	else if (!strcmp(what, "command")) print_seq(get(c, "command"));
	else if (!strcmp(what, "ready")) print_seq(path(c, "readinessProbe.exec.command"));
	else if (!strcmp(what, "live")) print_seq(path(c, "livenessProbe.exec.command"));
	else if (!strcmp(what, "labels")) print_map(path(root, "spec.template.metadata.labels"));
	else if (!strcmp(what, "env")) {
		yaml_node_t *e;
		for (size_t i = 0; (e = item(get(c, "env"), i)); i++) {
			const char *name = str(get(e, "name")), *v = str(get(e, "value"));
			const char *fp = str(path(e, "valueFrom.fieldRef.fieldPath"));
			const char *sn = str(path(e, "valueFrom.secretKeyRef.name")), *sk = str(path(e, "valueFrom.secretKeyRef.key"));
			if (v) printf("%s=%s\n", name, v);
			else if (fp) printf("%s=@field:%s\n", name, fp);
			else if (sn) printf("%s=@secret:%s/%s\n", name, sn, sk ? sk : "");
		}
	} else if (!strcmp(what, "mounts")) {
		yaml_node_t *m, *v;
		for (size_t i = 0; (m = item(get(c, "volumeMounts"), i)); i++) {
			const char *name = str(get(m, "name"));
			for (size_t k = 0; (v = item(get(pod, "volumes"), k)); k++) {
				if (!name || !str(get(v, "name")) || strcmp(name, str(get(v, "name")))) continue;
				if (path(v, "hostPath.path")) printf("%s=hostpath:%s\n", str(get(m, "mountPath")), str(path(v, "hostPath.path")));
				else if (path(v, "secret.secretName"))
					printf("%s=secret:%s\n", str(get(m, "mountPath")), str(path(v, "secret.secretName")));
				else printf("%s=other\n", str(get(m, "mountPath")));
			}
		}
	} else return -1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: skein_k8s FILE KIND NAME args|command|env|ready|live|mounts|labels|selector\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	if (!f) { fprintf(stderr, "skein_k8s: cannot read %s\n", argv[1]); return 1; }
	yaml_parser_t p;
	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	int rc = 1;
	for (;;) {
		yaml_document_t d;
		if (!yaml_parser_load(&p, &d)) {
			fprintf(stderr, "skein_k8s: %s: line %zu: %s\n", argv[1], p.problem_mark.line + 1, p.problem ? p.problem : "error");
			break;
		}
		g_doc = &d;
		yaml_node_t *root = yaml_document_get_root_node(&d);
		if (!root) { yaml_document_delete(&d); fprintf(stderr, "skein_k8s: no %s %s\n", argv[2], argv[3]); break; }
		const char *kind = str(get(root, "kind")), *name = str(path(root, "metadata.name"));
		if (kind && name && !strcmp(kind, argv[2]) && !strcmp(name, argv[3])) {
			rc = field(root, kind, argv[4]) == 0 ? 0 : 1;
			if (rc) fprintf(stderr, "skein_k8s: %s %s: no '%s'\n", argv[2], argv[3], argv[4]);
			yaml_document_delete(&d);
			break;
		}
		yaml_document_delete(&d);
	}
	yaml_parser_delete(&p);
	fclose(f);
	return rc;
}
