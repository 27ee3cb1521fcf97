/*
 * What the translation units of liftbridge_sync._speedups share (see _speedups.c for the
 * module and its functions, _speedups_submit.c for the publish_async fast path,
 * _speedups_table.c for the PendingCore type, _speedups_outbound.c for OutboundQueue).
 */
#ifndef LIFTBRIDGE_SYNC_SPEEDUPS_H
#define LIFTBRIDGE_SYNC_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Symbols shared between the module's files, kept out of the dynamic symbol table: an
 * extension's exported name could otherwise bind to another library's. */
#define LBS_INTERNAL __attribute__((visibility("hidden")))

/* _speedups_entry.c: one pending publish, the base of the publisher's Entry (see there). */
enum { E_FRAMED, E_CID, E_PARTITION, E_WANTS_ACK, E_FUTURE, E_TIMEOUT, E_DEADLINE, E_SEQ,
       E_RESENT_AT, E_KEY, ENTRY_FIELDS };
typedef struct {
    PyObject_HEAD
    PyObject *fields[ENTRY_FIELDS]; /* in the order above */
} EntryCoreObject;
LBS_INTERNAL extern PyTypeObject *entry_core_type;
/* obj as an EntryCore; NULL with TypeError if it is none. */
LBS_INTERNAL EntryCoreObject *entry_core(PyObject *obj);
/* A field of an entry (new reference); NULL with an exception if obj is no entry. */
LBS_INTERNAL PyObject *entry_get(PyObject *entry, int field);
LBS_INTERNAL int add_entry_core(PyObject *module);

/* _speedups_ack.c: the fields of an ack, the base of liftbridge_sync.models.Ack (see
 * there), in the order parse_response fills them; ack_type is the Ack class setup() was
 * given (a subclass of AckCore). */
enum { A_STREAM, A_PARTITION, A_PSUBJECT, A_MSUBJECT, A_OFFSET, A_INBOX, A_CID, A_POLICY,
       A_RECEPTION, A_COMMIT, A_ERROR, ACK_FIELDS };
typedef struct {
    PyObject_HEAD
    PyObject *fields[ACK_FIELDS]; /* in the order above */
} AckCoreObject;
LBS_INTERNAL extern PyTypeObject *ack_core_type;
LBS_INTERNAL int add_ack_core(PyObject *module);
LBS_INTERNAL extern PyObject *ack_type;
LBS_INTERNAL extern PyObject *policies; /* AckPolicy LEADER, ALL, NONE */
/* Shared constants: "", -1, 0, 0.0. */
LBS_INTERNAL extern PyObject *empty_str, *minus_one, *zero, *zero_float;

/* 0 once setup_entries() ran; -1 with RuntimeError before. */
LBS_INTERNAL int entries_set_up(void);
/* The framed request for head + value with the correlation id prefix + decimal n, and
 * that id (new references); -1 on error. */
LBS_INTERNAL int frame_with_id(PyObject *head, PyObject *value, PyObject *prefix_obj,
                               PyObject *n_obj, PyObject **framed_out, PyObject **cid_out);
/* A new Entry (framed, cid, then partition, wants_ack, timeout, deadline in rest) with a
 * new future (*future_out, a new reference); NULL on error. */
LBS_INTERNAL PyObject *new_entry(PyObject *framed, PyObject *cid, PyObject *const *rest,
                                 PyObject **future_out);

/* _speedups_acks.c */
LBS_INTERNAL PyObject *decode_ack(PyObject *self, PyObject *message);
LBS_INTERNAL PyObject *scan_acks(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* 1: an answer naming stream (a str) is another stream's than the one the framed
 * request (bytes) went to; 0: the same, or unknown; -1: error set. */
LBS_INTERNAL int answers_another_stream(PyObject *stream, PyObject *framed);
LBS_INTERNAL PyObject *answers_another_stream_fn(PyObject *self, PyObject *const *args,
                                                 Py_ssize_t nargs);

/* _speedups_io.c */
LBS_INTERNAL PyObject *send_held(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
LBS_INTERNAL PyObject *recv_held(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* _speedups_lock.c: the C types' lock, with threading.Lock's methods (see there). */
/* Take the lock: 1 taken, 0 not (only without blocking), -1 with an exception (a
 * signal handler raised while it blocked). */
LBS_INTERNAL int lbs_lock_take(PyThread_type_lock lock, int blocking);
LBS_INTERNAL PyObject *lbs_lock_acquire(PyThread_type_lock lock, PyObject *const *args,
                                        Py_ssize_t nargsf, PyObject *kwnames);
LBS_INTERNAL PyObject *lbs_lock_release(PyThread_type_lock lock);
LBS_INTERNAL PyObject *lbs_lock_locked(PyThread_type_lock lock);

/* _speedups_future.c: a publish future's state (see there). */
typedef struct {
    PyObject_HEAD
    PyObject *state;     /* concurrent.futures' state string: "RUNNING" or "FINISHED" */
    PyObject *result;    /* the Ack (or None) once resolved */
    PyObject *exception; /* the typed error once failed, else None */
    PyObject *callbacks; /* () without done-callbacks, the callable with one, a list */
    PyObject *gate;      /* the Gate of the thread blocked in wait_gated, or None */
    PyObject *ledger;    /* a failure's Unobserved tracker, or None */
    char waited;         /* some thread blocks on it: wake it when resolved */
    char conditioned;    /* its _condition and _waiters exist (in its instance dict) */
} FutureCoreObject;
LBS_INTERNAL extern PyTypeObject *future_core_type;
/* obj as a FutureCore; NULL with TypeError if it is none. */
LBS_INTERNAL FutureCoreObject *future_core(PyObject *obj);
/* 1 if resolved, 0 if not, -1 on error. */
LBS_INTERNAL int future_finished(FutureCoreObject *future);
LBS_INTERNAL int add_future_core(PyObject *module);
/* Shared constants: the interned "FINISHED" and the empty tuple (no callbacks). */
LBS_INTERNAL extern PyObject *s_finished, *empty_tuple;

/* _speedups_table.c: the pending table's state (see there). */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock; /* the send lock */
    PyObject *pending;       /* dict: correlation id -> Entry, in sequence order */
    PyObject *expiry;        /* dict: timeout -> deque of Entry, in send order */
    PyObject *live;          /* the stream publishes are written to, or None */
    PyObject *outbound;      /* its OutboundQueue (HTTP/2 streams), or None */
    PyObject *clock;         /* () -> float */
    PyObject *prefix;        /* str: the correlation ids' prefix */
    Py_ssize_t max_in_flight, max_message;
    long long seq;      /* the last sequence number handed out */
    long long ids;      /* the next correlation id number */
    double sleep_until; /* the owner loop sleeps until then */
    Py_ssize_t in_line; /* threads in line for a free slot: no slot is taken past them */
    char closing, finished;
} PendingCoreObject;
LBS_INTERNAL extern PyTypeObject *pending_core_type;
LBS_INTERNAL int add_pending_core(PyObject *module);

/* _speedups_outbound.c: an HTTP/2 publish stream's outbound queue (see there). */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock; /* the stream's lock */
    PyObject *frames;        /* list of bytes: framed requests queued */
    Py_ssize_t queued_bytes, taken_bytes, asked, write_here_at;
    Py_ssize_t direct_mark; /* asked when a publish() caller last queued its own */
    Py_ssize_t combining;   /* callers woken by a hand-over still to queue theirs */
    char signalled, done, close_requested;
    char deferred; /* one of them queued without writing: take it within COMBINE_WAIT */
} OutboundQueueObject;
LBS_INTERNAL extern PyTypeObject *outbound_queue_type;
LBS_INTERNAL int add_outbound_queue(PyObject *module);

/* _speedups_gate.c: what a blocked publishing thread sleeps on (see there). */
LBS_INTERNAL int add_gate(PyObject *module);

/* _speedups_submit.c */
LBS_INTERNAL PyObject *setup_submit(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
LBS_INTERNAL PyObject *submit_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
