/* Lock-striped hash table: 64 stripes, each its own mutex and buckets, so 32
 * threads allocating at once rarely meet. No lock is ever held across a call
 * into the driver: callers reserve in the region, call, then insert (commit)
 * or release (roll back). */
#include <pthread.h>
#include <stdlib.h>
#include "ptrtab.h"
#include "vgpu.h"

#define STRIPES 64
#define BUCKETS 256

struct node {
    struct node *next;
    int kind;
    uint64_t key;
    struct vgpu_rec rec;
};

struct stripe {
    pthread_mutex_t mu;
    struct node *b[BUCKETS];
};

static struct stripe tab[STRIPES];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void prepare(void)
{
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_lock(&tab[i].mu);
}
static void parent(void)
{
    for (int i = STRIPES - 1; i >= 0; i--)
        pthread_mutex_unlock(&tab[i].mu);
}
/* The parent's allocations are not the child's: its slot starts empty, so the
 * table must too (a free of an inherited pointer then goes to the driver). */
static void child(void)
{
    for (int i = 0; i < STRIPES; i++) {
        for (int j = 0; j < BUCKETS; j++) {
            struct node *n = tab[i].b[j], *next;
            for (; n; n = next) {
                next = n->next;
                free(n);
            }
            tab[i].b[j] = NULL;
        }
        pthread_mutex_init(&tab[i].mu, NULL);
    }
}
static void init(void)
{
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&tab[i].mu, NULL);
    pthread_atfork(prepare, parent, child);
}

static uint64_t hash(int kind, uint64_t key)
{
    uint64_t h = key ^ ((uint64_t)kind << 56);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static struct node **find(struct stripe *s, uint64_t h, int kind, uint64_t key)
{
    struct node **pp = &s->b[(h >> 8) % BUCKETS];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->kind == kind && (*pp)->key == key)
            return pp;
    return pp;
}

#define STRIPE(h) (&tab[(h) % STRIPES])

int vgpu_ptr_insert(int kind, uint64_t key, const struct vgpu_rec *r)
{
    uint64_t h = hash(kind, key);
    struct stripe *s;
    struct node **pp, *n;

    pthread_once(&once, init);
    n = malloc(sizeof *n);
    if (!n)
        return -1;
    n->kind = kind;
    n->key = key;
    n->rec = *r;
    n->next = NULL;
    s = STRIPE(h);
    pthread_mutex_lock(&s->mu);
    pp = find(s, h, kind, key);
    if (*pp) {
        pthread_mutex_unlock(&s->mu);
        free(n);
        return -1;
    }
    *pp = n;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int lookup(int kind, uint64_t key, struct vgpu_rec *out, int remove, const uint64_t *newsize,
                  const uint64_t *newaux)
{
    uint64_t h = hash(kind, key);
    struct stripe *s;
    struct node **pp, *n;

    pthread_once(&once, init);
    s = STRIPE(h);
    pthread_mutex_lock(&s->mu);
    pp = find(s, h, kind, key);
    n = *pp;
    if (!n) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    if (out)
        *out = n->rec;
    if (newsize)
        n->rec.size = *newsize;
    if (newaux)
        n->rec.aux = *newaux;
    if (remove)
        *pp = n->next;
    pthread_mutex_unlock(&s->mu);
    if (remove)
        free(n);
    return 0;
}

int vgpu_ptr_take(int kind, uint64_t key, struct vgpu_rec *out) { return lookup(kind, key, out, 1, NULL, NULL); }
int vgpu_ptr_get(int kind, uint64_t key, struct vgpu_rec *out) { return lookup(kind, key, out, 0, NULL, NULL); }

int vgpu_ptr_set_size(int kind, uint64_t key, uint64_t size, uint64_t *old)
{
    struct vgpu_rec r;
    int rc = lookup(kind, key, &r, 0, &size, NULL);
    if (rc == 0 && old)
        *old = r.size;
    return rc;
}

int vgpu_ptr_set_aux(int kind, uint64_t key, uint64_t aux) { return lookup(kind, key, NULL, 0, NULL, &aux); }

void vgpu_ptr_each(int kind, void (*fn)(uint64_t key, const struct vgpu_rec *r))
{
    pthread_once(&once, init);
    for (int i = 0; i < STRIPES; i++) {
        uint64_t keys[64];
        struct vgpu_rec recs[64];
        int n = 0;
        pthread_mutex_lock(&tab[i].mu);
        for (int j = 0; j < BUCKETS && n < 64; j++)
            for (struct node *p = tab[i].b[j]; p && n < 64; p = p->next)
                if (p->kind == kind) {
                    keys[n] = p->key;
                    recs[n++] = p->rec;
                }
        pthread_mutex_unlock(&tab[i].mu);
        for (int k = 0; k < n; k++)
            fn(keys[k], &recs[k]);
    }
}
