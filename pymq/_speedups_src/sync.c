/* pymq._speedups.Syncer: msync(MS_SYNC) on a thread of its own that never takes the GIL.
 *
 * SYNC_FLUSH's group commit (pymq/broker/loop_sync.py) submits the commitlog ranges a sync must
 * cover; this thread syncs them and reports each job through an eventfd the event loop watches,
 * so neither hand-off (request to the thread, answer to the loop) waits for the GIL. The thread
 * touches no Python object: it reads a job's ranges and writes its errno, under the mutex.
 *
 * Jobs live in a ring of `capacity` slots, in submit order: [head, run) done (waiting for take()),
 * [run, tail) queued (the one at run is being synced). A token is any object: the syncer holds a
 * reference to it until take() hands it back, so the caller can make the token keep the synced
 * memory mapped (pymq.broker.store.sync_plan.SyncPlan holds buffer exports of the mappings).
 */
#include "speedups.h"

#ifdef __linux__ /* eventfd; elsewhere the module has no Syncer and SYNC_FLUSH keeps its flusher thread */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    uintptr_t addr;
    size_t len;
} sync_range;

typedef struct {
    PyObject *token; /* owned; only touched with the GIL */
    sync_range *ranges;
    Py_ssize_t nranges;
    int err;
} sync_job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cond;      /* a job was queued, or closing */
    pthread_cond_t exit_cond; /* the thread is exiting (for a second, concurrent close) */
    pthread_t thread;
    int started;  /* the thread exists (joined by close) */
    int closing;  /* no more submits; the thread exits once the queue is empty */
    int exited;   /* the thread has run its last job */
    int joined;   /* a close claimed the join */
    int efd;
    Py_ssize_t capacity;
    uint64_t head, run, tail;
    sync_job *jobs;
    size_t page;
} SyncerObject;

static int sync_range_of(sync_range *r, size_t page, int *err) {
    uintptr_t start = r->addr - r->addr % page;
    if (r->len == 0) return 0;
    if (msync((void *)start, r->len + (r->addr - start), MS_SYNC) != 0) {
        *err = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

static void *syncer_main(void *arg) {
    SyncerObject *s = (SyncerObject *)arg;
    const uint64_t one = 1;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->run == s->tail && !s->closing) pthread_cond_wait(&s->cond, &s->mu);
        if (s->run == s->tail) break; /* closing, and every queued job is done */
        sync_job *job = &s->jobs[s->run % (uint64_t)s->capacity];
        pthread_mutex_unlock(&s->mu);
        /* The job's ranges are not written while it is queued: submit fills only free slots. */
        int err = 0;
        for (Py_ssize_t i = 0; i < job->nranges; i++)
            if (sync_range_of(&job->ranges[i], s->page, &err) < 0) break;
        pthread_mutex_lock(&s->mu);
        job->err = err;
        s->run++;
        /* (under the mutex, as take() reads the eventfd with the job counters: no wake-up lost) */
        ssize_t n;
        do {
            n = write(s->efd, &one, sizeof one);
        } while (n < 0 && errno == EINTR);
        /* (EAGAIN: the counter is at its maximum, the loop is readable anyway) */
    }
    s->exited = 1;
    pthread_cond_broadcast(&s->exit_cond);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static PyObject *syncer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t capacity = 4;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:Syncer", kwlist, &capacity)) return NULL;
    if (capacity < 1 || capacity > 1024) {
        PyErr_SetString(PyExc_ValueError, "Syncer capacity must be 1..1024");
        return NULL;
    }
    SyncerObject *s = (SyncerObject *)type->tp_alloc(type, 0);
    if (s == NULL) return NULL;
    s->efd = -1;
    s->page = (size_t)sysconf(_SC_PAGESIZE);
    s->capacity = capacity;
    s->jobs = PyMem_Calloc((size_t)capacity, sizeof(sync_job));
    if (s->jobs == NULL) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_cond_init(&s->exit_cond, NULL);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    /* The thread blocks every signal: Python's handlers run on the main thread anyway. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, syncer_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    s->started = 1;
    return (PyObject *)s;
}

/* Stop the thread (it syncs every queued job first); the done jobs stay for take(), the eventfd until dealloc. */
static void syncer_stop(SyncerObject *s) {
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    int join = s->started && !s->joined;
    s->joined = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
    if (join) {
        Py_BEGIN_ALLOW_THREADS;
        pthread_join(s->thread, NULL);
        Py_END_ALLOW_THREADS;
    } else if (s->started) {
        /* Another thread is joining: still return only once every queued job has run. */
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&s->mu);
        while (!s->exited) pthread_cond_wait(&s->exit_cond, &s->mu);
        pthread_mutex_unlock(&s->mu);
        Py_END_ALLOW_THREADS;
    }
    /* The eventfd stays open until dealloc: a loop may still watch it (the store can stop
     * before the broker's LoopSync leaves the loop), and a closed number could be reused by
     * a socket the loop then confuses with it. */
}

static void syncer_dealloc(SyncerObject *s) {
    if (s->jobs != NULL) {
        syncer_stop(s);
        if (s->efd >= 0) {
            close(s->efd);
            s->efd = -1;
        }
        for (uint64_t i = s->head; i < s->tail; i++) {
            sync_job *job = &s->jobs[i % (uint64_t)s->capacity];
            Py_CLEAR(job->token);
            PyMem_Free(job->ranges);
        }
        PyMem_Free(s->jobs);
        pthread_cond_destroy(&s->exit_cond);
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->mu);
    } else if (s->efd >= 0) {
        close(s->efd);
    }
    Py_TYPE(s)->tp_free((PyObject *)s);
}

SPEEDUPS_DOC(syncer_submit_doc,
             "submit(token, ranges) -> None\n"
             "Queue one sync: msync(MS_SYNC) of each (address, length) of ranges (the address is rounded down\n"
             "to its page), in order, on the syncer's thread. Returns at once; take() answers (token, errno)\n"
             "once it is done (errno 0: every range synced; else the first failure's). The syncer keeps a\n"
             "reference to token until then. RuntimeError if the queue is full (capacity jobs submitted and\n"
             "not taken) or the syncer is closed.");

static PyObject *syncer_submit(SyncerObject *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "submit takes 2 arguments (token, ranges)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "ranges must be a sequence of (address, length)");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    sync_range *ranges = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(sync_range));
    if (ranges == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        unsigned long long addr, len;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "each range must be a tuple (address, length)");
            goto fail;
        }
        addr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 0));
        if (PyErr_Occurred()) goto fail;
        len = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred()) goto fail;
        if (addr > UINTPTR_MAX || len > SIZE_MAX / 2) {
            PyErr_SetString(PyExc_OverflowError, "range out of the address space");
            goto fail;
        }
        ranges[i].addr = (uintptr_t)addr;
        ranges[i].len = (size_t)len;
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&s->mu);
    if (s->closing || s->tail - s->head >= (uint64_t)s->capacity) {
        int closing = s->closing;
        pthread_mutex_unlock(&s->mu);
        PyMem_Free(ranges);
        PyErr_SetString(PyExc_RuntimeError, closing ? "the syncer is closed" : "the syncer's queue is full");
        return NULL;
    }
    sync_job *job = &s->jobs[s->tail % (uint64_t)s->capacity];
    Py_INCREF(args[0]);
    job->token = args[0];
    job->ranges = ranges;
    job->nranges = n;
    job->err = 0;
    s->tail++;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    PyMem_Free(ranges);
    return NULL;
}

SPEEDUPS_DOC(syncer_take_doc,
             "take() -> list[tuple[token, errno]]\n"
             "The jobs done since the last take(), in submit order (errno 0: synced); resets the eventfd.\n"
             "Works after close() too (the jobs the thread finished before it stopped).");

/* One taker at a time (the broker's loop, or a test): the done jobs are read outside the mutex,
 * so two threads taking at once would both hand out the same jobs. */
static PyObject *syncer_take(SyncerObject *s, PyObject *unused) {
    pthread_mutex_lock(&s->mu);
    if (s->efd >= 0) {
        uint64_t count;
        ssize_t r;
        do {
            r = read(s->efd, &count, sizeof count);
        } while (r < 0 && errno == EINTR); /* (EAGAIN: nothing signalled since the last take) */
    }
    uint64_t head = s->head, run = s->run;
    pthread_mutex_unlock(&s->mu);
    /* [head, run) are done: the thread does not touch them again, and only take() moves head. */
    PyObject *out = PyList_New((Py_ssize_t)(run - head));
    if (out == NULL) return NULL;
    for (uint64_t i = head; i < run; i++) {
        sync_job *job = &s->jobs[i % (uint64_t)s->capacity];
        PyObject *pair = Py_BuildValue("(Oi)", job->token, job->err);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)(i - head), pair);
    }
    for (uint64_t i = head; i < run; i++) {
        sync_job *job = &s->jobs[i % (uint64_t)s->capacity];
        Py_CLEAR(job->token);
        PyMem_Free(job->ranges);
        job->ranges = NULL;
    }
    pthread_mutex_lock(&s->mu);
    s->head = run;
    pthread_mutex_unlock(&s->mu);
    return out;
}

SPEEDUPS_DOC(syncer_fileno_doc,
             "fileno() -> int\nThe eventfd, readable once a job is done (for loop.add_reader); ValueError after close().");

static PyObject *syncer_fileno(SyncerObject *s, PyObject *unused) {
    pthread_mutex_lock(&s->mu);
    int fd = s->closing ? -1 : s->efd;
    pthread_mutex_unlock(&s->mu);
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "the syncer is closed");
        return NULL;
    }
    return PyLong_FromLong(fd);
}

SPEEDUPS_DOC(syncer_close_doc,
             "close() -> None\n"
             "Refuse further submits, let the thread sync every job already queued (they complete: take()\n"
             "reports them afterwards) and join it. The eventfd stays open (unwatched: fileno() refuses) until\n"
             "the syncer goes, so a loop still watching it never sees its number reused. Idempotent; the\n"
             "syncer's dealloc does it too.");

static PyObject *syncer_close(SyncerObject *s, PyObject *unused) {
    syncer_stop(s);
    Py_RETURN_NONE;
}

static PyObject *syncer_get_pending(SyncerObject *s, void *closure) {
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->tail - s->head;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *syncer_get_closed(SyncerObject *s, void *closure) {
    pthread_mutex_lock(&s->mu);
    int closing = s->closing;
    pthread_mutex_unlock(&s->mu);
    return PyBool_FromLong(closing);
}

static PyMethodDef syncer_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))syncer_submit, METH_FASTCALL, syncer_submit_doc},
    {"take", (PyCFunction)syncer_take, METH_NOARGS, syncer_take_doc},
    {"fileno", (PyCFunction)syncer_fileno, METH_NOARGS, syncer_fileno_doc},
    {"close", (PyCFunction)syncer_close, METH_NOARGS, syncer_close_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef syncer_getset[] = {
    {"pending", (getter)syncer_get_pending, NULL, "jobs submitted and not taken yet (queued, running or done)", NULL},
    {"closed", (getter)syncer_get_closed, NULL, "True once close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SyncerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pymq._speedups.Syncer",
    .tp_basicsize = sizeof(SyncerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Syncer(capacity=4): msync(MS_SYNC) jobs on a thread without the GIL, done jobs signalled "
                        "on an eventfd (see pymq/_speedups_src/sync.c)."),
    .tp_new = syncer_new,
    .tp_dealloc = (destructor)syncer_dealloc,
    .tp_methods = syncer_methods,
    .tp_getset = syncer_getset,
};

int sync_init(PyObject *m) {
    if (PyType_Ready(&SyncerType) < 0) return -1;
    Py_INCREF(&SyncerType);
    if (PyModule_AddObject(m, "Syncer", (PyObject *)&SyncerType) < 0) {
        Py_DECREF(&SyncerType);
        return -1;
    }
    return 0;
}
#else
int sync_init(PyObject *m) { return 0; }
#endif
