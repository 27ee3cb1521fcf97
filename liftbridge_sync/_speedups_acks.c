/*
 * Reading acks straight from received HTTP/2 frames: scan_acks of
 * liftbridge_sync._speedups (described in _speedups.c, with the module's other
 * functions), and the protobuf decoding of a PublishResponse it needs, also on its own
 * as decode_ack (the drop-in for liftbridge_sync._wire.publish_codec.decode_ack).
 */
#include "_speedups.h"

#include <stdint.h>
#include <string.h>

/* 1: read, 0: malformed (truncated or longer than 10 bytes). */
static int
get_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    const uint8_t *q = *p;
    while (q < end && shift < 70) {
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *out = v;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* A tag as protobuf (upb) reads it: a varint of at most 5 bytes holding at most 32 bits,
 * with a field number of at least 1 (so at most 2^29 - 1); 1: *field and *wt set, 0:
 * malformed (protobuf raises DecodeError for it). Reading it as a 64-bit varint and
 * narrowing it would take field 2^32 + 1 for field 1. */
static int
get_tag(const uint8_t **p, const uint8_t *end, uint32_t *field, unsigned *wt)
{
    const uint8_t *q = *p;
    uint64_t v;
    if (!get_varint(&q, end, &v) || q - *p > 5 || v > UINT32_MAX || (v >> 3) == 0)
        return 0;
    *p = q;
    *field = (uint32_t)(v >> 3);
    *wt = (unsigned)(v & 7);
    return 1;
}

/* The length of a length-delimited field as protobuf reads it: a varint of at most 5
 * bytes, and no longer than what is left; 1: read, 0: malformed. */
static int
get_size(const uint8_t **p, const uint8_t *end, Py_ssize_t *out)
{
    const uint8_t *q = *p;
    uint64_t v;
    if (!get_varint(&q, end, &v) || q - *p > 5 || v > (uint64_t)(end - q))
        return 0;
    *p = q;
    *out = (Py_ssize_t)v;
    return 1;
}

/* Skip a field of wire type wt: 1 done, 0 malformed or unsupported (groups, which
 * protobuf reads, and wire types 6 and 7, which it rejects: both left to it). */
static int
skip_field(const uint8_t **p, const uint8_t *end, unsigned wt)
{
    uint64_t v;
    switch (wt) {
    case 0:
        return get_varint(p, end, &v);
    case 1:
        if (end - *p < 8)
            return 0;
        *p += 8;
        return 1;
    case 2: {
        Py_ssize_t size;
        if (!get_size(p, end, &size))
            return 0;
        *p += size;
        return 1;
    }
    case 5:
        if (end - *p < 4)
            return 0;
        *p += 4;
        return 1;
    default:
        return 0;
    }
}

typedef struct {
    const uint8_t *ptr;
    Py_ssize_t len;
    int set;
} span;

/* The str of a span, reusing *last when it holds the same text. New reference, or
 * NULL with an error set (memory) or without (invalid UTF-8). */
static PyObject *
text(span s, PyObject **last)
{
    if (!s.set || s.len == 0) {
        Py_INCREF(empty_str);
        return empty_str;
    }
    if (*last != NULL) {
        Py_ssize_t size;
        const char *data = PyUnicode_AsUTF8AndSize(*last, &size);
        if (data != NULL && size == s.len && memcmp(data, s.ptr, (size_t)s.len) == 0) {
            Py_INCREF(*last);
            return *last;
        }
        PyErr_Clear();
    }
    PyObject *str = PyUnicode_DecodeUTF8((const char *)s.ptr, s.len, NULL);
    if (str == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear(); /* protobuf raises for it: leave it to the slow path */
        return NULL;
    }
    Py_XSETREF(*last, Py_NewRef(str));
    return str;
}

#define STRING_FIELDS 5
enum { F_STREAM, F_PSUBJECT, F_MSUBJECT, F_INBOX, F_CID };

/* 1: *out is an Ack; 0: not a plain successful ack (no error set); -1: error. */
static int
parse_response(const uint8_t *p, const uint8_t *end, PyObject **last, PyObject **out)
{
    span ack = {NULL, 0, 0};
    Py_ssize_t size;
    /* Anything protobuf reads differently from a plain, once-set field is left to it
     * (return 0): the Python reader then parses the response, or ends the stream with
     * an INTERNAL error when protobuf raises DecodeError. */
    while (p < end) {
        uint32_t field;
        unsigned wt;
        if (!get_tag(&p, end, &field, &wt))
            return 0;
        if (field == 1) {
            /* Another wire type makes it an unknown field, a second one is merged. */
            if (wt != 2 || ack.set || !get_size(&p, end, &size))
                return 0;
            ack.ptr = p;
            ack.len = size;
            ack.set = 1;
            p += size;
        }
        else if (field == 2) {
            return 0; /* asyncError */
        }
        else if (field == 3 && wt == 2) {
            /* correlationId (of asyncError): not read, but protobuf checks its UTF-8. */
            if (!get_size(&p, end, &size))
                return 0;
            PyObject *str = PyUnicode_DecodeUTF8((const char *)p, size, NULL);
            if (str == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    return -1;
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(str);
            p += size;
        }
        else if (!skip_field(&p, end, wt)) {
            return 0;
        }
    }
    if (!ack.set)
        return 0;
    span strings[STRING_FIELDS];
    memset(strings, 0, sizeof(strings));
    uint64_t offset = 0, policy = 0, reception = 0, commit = 0, error = 0;
    p = ack.ptr;
    end = ack.ptr + ack.len;
    while (p < end) {
        uint32_t field;
        unsigned wt;
        if (!get_tag(&p, end, &field, &wt))
            return 0;
        int index = -1;
        uint64_t *number = NULL;
        switch (field) {
        case 1: index = F_STREAM; break;
        case 2: index = F_PSUBJECT; break;
        case 3: index = F_MSUBJECT; break;
        case 5: index = F_INBOX; break;
        case 6: index = F_CID; break;
        case 4: number = &offset; break;
        case 7: number = &policy; break;
        case 8: number = &reception; break;
        case 9: number = &commit; break;
        case 10: number = &error; break;
        default:
            if (!skip_field(&p, end, wt))
                return 0;
            continue;
        }
        if (index >= 0) {
            /* A repeated one: protobuf checks the UTF-8 of each, only the last is kept
             * here (and checked); another wire type: an unknown field to protobuf. */
            if (wt != 2 || strings[index].set || !get_size(&p, end, &size))
                return 0;
            strings[index].ptr = p;
            strings[index].len = size;
            strings[index].set = 1;
            p += size;
        }
        else {
            if (wt != 0 || !get_varint(&p, end, number))
                return 0;
        }
    }
    if ((int32_t)error != 0 || !strings[F_CID].set || strings[F_CID].len == 0)
        return 0;
    PyObject *values[STRING_FIELDS];
    for (int i = 0; i < STRING_FIELDS; i++) {
        values[i] = text(strings[i], &last[i]);
        if (values[i] == NULL) {
            for (int j = 0; j < i; j++)
                Py_DECREF(values[j]);
            return PyErr_Occurred() ? -1 : 0;
        }
    }
    PyTypeObject *type = (PyTypeObject *)ack_type;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) {
        for (int i = 0; i < STRING_FIELDS; i++)
            Py_DECREF(values[i]);
        return -1;
    }
    int32_t wire_policy = (int32_t)policy;
    PyObject *policy_obj = PyTuple_GET_ITEM(policies, 0 <= wire_policy && wire_policy < 3 ? wire_policy : 0);
    PyObject *fields[ACK_FIELDS] = {
        values[F_STREAM],
        Py_NewRef(minus_one),
        values[F_PSUBJECT],
        values[F_MSUBJECT],
        PyLong_FromLongLong((long long)(int64_t)offset),
        values[F_INBOX],
        values[F_CID],
        Py_NewRef(policy_obj),
        reception ? PyLong_FromLongLong((long long)(int64_t)reception) : Py_NewRef(zero),
        commit ? PyLong_FromLongLong((long long)(int64_t)commit) : Py_NewRef(zero),
        Py_NewRef(Py_None),
    };
    /* Straight into the fresh object's (empty) AckCore fields, around the frozen
     * dataclass's __setattr__. The object owns every reference from here. */
    int failed = 0;
    for (int i = 0; i < ACK_FIELDS; i++) {
        if (fields[i] == NULL)
            failed = 1;
        ((AckCoreObject *)obj)->fields[i] = fields[i];
    }
    if (failed) {
        Py_DECREF(obj);
        return -1;
    }
    /* An Ack holds only str, int, None and an AckPolicy member: it can never be part of a
     * reference cycle, so the cyclic GC has no reason to walk it (CPython untracks tuples
     * and dicts of such values the same way). One fewer tracked object per publish makes
     * every collection cheaper while acks are held. */
    PyObject_GC_UnTrack(obj);
    *out = obj;
    return 1;
}

LBS_INTERNAL PyObject *
decode_ack(PyObject *self, PyObject *message)
{
    if (ack_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() not called");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(message, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *last[STRING_FIELDS] = {NULL, NULL, NULL, NULL, NULL};
    PyObject *ack = NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    int rc = parse_response(p, p + view.len, last, &ack);
    PyBuffer_Release(&view);
    for (int i = 0; i < STRING_FIELDS; i++)
        Py_XDECREF(last[i]);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        Py_RETURN_NONE;
    return ack;
}

/* Grows *buf (PyMem, capacity *cap) to hold at least need bytes, to twice that plus
 * some; -1 with MemoryError (the buffer is left as it was). */
static int
room_for(char **buf, Py_ssize_t *cap, Py_ssize_t need)
{
    if (need <= *cap)
        return 0;
    Py_ssize_t grown_cap = need * 2 + 64;
    char *grown = PyMem_Realloc(*buf, (size_t)grown_cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = grown;
    *cap = grown_cap;
    return 0;
}

static uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

LBS_INTERNAL PyObject *
scan_acks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "scan_acks(buf, pos, stream_id, max_frame)");
        return NULL;
    }
    if (ack_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() not called");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long sid = PyLong_AsLong(args[2]);
    Py_ssize_t max_frame = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len;
    PyObject *acks = PyList_New(0);
    PyObject *last[STRING_FIELDS] = {NULL, NULL, NULL, NULL, NULL};
    Py_ssize_t payload = 0;
    char *control = NULL, *pong = NULL;
    Py_ssize_t control_len = 0, control_cap = 0, pong_len = 0, pong_cap = 0;
    char updates[13 * 64]; /* the WINDOW_UPDATE frames summed, as received */
    Py_ssize_t updates_len = 0;
    long long connection_increment = 0, stream_increment = 0;
    if (acks == NULL)
        goto fail;
    if (pos < 0)
        pos = 0;
    while (size - pos >= 9) {
        const uint8_t *h = b + pos;
        Py_ssize_t length = ((Py_ssize_t)h[0] << 16) | ((Py_ssize_t)h[1] << 8) | h[2];
        if (length > max_frame)
            break;
        Py_ssize_t end = pos + 9 + length;
        if (end > size)
            break;
        long stream = (long)(be32(h + 5) & 0x7FFFFFFF);
        if (stream == 0 && h[3] == 6 && length == 8) {
            /* PING: answered here (the broker's BDP pings come with every response when
             * publishing one at a time; h2 keeps no state for them). An ACK (the answer
             * to our keepalive probe) needs nothing: any read counts. */
            if (!(h[4] & 0x01)) {
                if (room_for(&pong, &pong_cap, pong_len + 17) < 0)
                    goto fail;
                memcpy(pong + pong_len, h, 17);
                pong[pong_len + 4] = 0x01; /* ACK */
                pong_len += 17;
            }
            pos = end;
            continue;
        }
        if (stream == 0 && h[3] == 4 && length == 0 && !(h[4] & 0x01)) {
            /* An empty SETTINGS: nothing for h2 to apply, only to acknowledge, which
             * is done here like a PING's (h2 takes ~10 us per frame: a flood of them
             * would keep the I/O thread busy long before its answers fill the cap). */
            if (room_for(&pong, &pong_cap, pong_len + 9) < 0)
                goto fail;
            memcpy(pong + pong_len, h, 9);
            pong[pong_len + 4] = 0x01; /* ACK */
            pong_len += 9;
            pos = end;
            continue;
        }
        if ((stream == 0 && (h[3] == 4 || h[3] == 6 || h[3] == 8)) ||
            (stream == sid && h[3] == 8)) {
            /* SETTINGS, PING, WINDOW_UPDATE of the connection and our stream's
             * WINDOW_UPDATE: collected for h2, except the WINDOW_UPDATEs with a valid
             * increment, which are summed (the caller adds them to h2's windows when
             * it may, and gives h2 their frames otherwise). */
            if ((h[3] == 4 && length % 6) || (h[3] == 6 && length != 8) ||
                (h[3] == 8 && length != 4))
                break; /* Python raises the FrameError */
            uint32_t increment = h[3] == 8 ? be32(h + 9) & 0x7FFFFFFF : 0;
            if (increment != 0) {
                if (updates_len + 13 > (Py_ssize_t)sizeof(updates)) {
                    break; /* more than fit: the Python reader takes what is left */
                }
                memcpy(updates + updates_len, h, 13);
                updates_len += 13;
                if (stream == 0)
                    connection_increment += increment;
                else
                    stream_increment += increment;
                pos = end;
                continue;
            }
            if (room_for(&control, &control_cap, control_len + 9 + length) < 0)
                goto fail;
            memcpy(control + control_len, h, (size_t)(9 + length));
            control_len += 9 + length;
            pos = end;
            continue;
        }
        if (h[3] != 0 || (h[4] & 0x09) || stream != sid)
            break;
        /* One or more whole gRPC messages filling the frame exactly, all plain acks. */
        const uint8_t *m = h + 9, *frame_end = b + end;
        Py_ssize_t before = PyList_GET_SIZE(acks);
        int whole = length > 0;
        while (whole && m < frame_end) {
            if (frame_end - m < 5 || m[0] != 0 || (Py_ssize_t)be32(m + 1) > frame_end - m - 5) {
                whole = 0;
                break;
            }
            const uint8_t *next = m + 5 + be32(m + 1);
            PyObject *ack = NULL;
            int rc = parse_response(m + 5, next, last, &ack);
            if (rc < 0)
                goto fail;
            if (rc == 0) {
                whole = 0;
                break;
            }
            rc = PyList_Append(acks, ack);
            Py_DECREF(ack);
            if (rc < 0)
                goto fail;
            m = next;
        }
        if (!whole) {
            /* Python reads this frame: drop what was taken from it. */
            if (PyList_SetSlice(acks, before, PyList_GET_SIZE(acks), NULL) < 0)
                goto fail;
            break;
        }
        payload += length;
        pos = end;
    }
    PyBuffer_Release(&view);
    for (int i = 0; i < STRING_FIELDS; i++)
        Py_XDECREF(last[i]);
    PyObject *frames = PyBytes_FromStringAndSize(control, control_len);
    PyObject *pongs = PyBytes_FromStringAndSize(pong, pong_len);
    PyMem_Free(control);
    PyMem_Free(pong);
    PyObject *windows = updates_len == 0 ? Py_NewRef(Py_None)
                                         : Py_BuildValue("(LLy#)", connection_increment,
                                                         stream_increment, updates, updates_len);
    if (frames == NULL || pongs == NULL || windows == NULL) {
        Py_XDECREF(frames);
        Py_XDECREF(pongs);
        Py_XDECREF(windows);
        Py_DECREF(acks);
        return NULL;
    }
    return Py_BuildValue("(nNnNNN)", pos, acks, payload, frames, pongs, windows);
fail:
    PyMem_Free(control);
    PyMem_Free(pong);
    PyBuffer_Release(&view);
    for (int i = 0; i < STRING_FIELDS; i++)
        Py_XDECREF(last[i]);
    Py_XDECREF(acks);
    return NULL;
}


/* ------------------------------------------------------------ answers' streams */

/* The stream name (field 3) of a framed PublishRequest, read past its 5-byte gRPC
 * prefix as publish_codec.framed_stream reads it: 1 found (*name, *len set), 0 none, or
 * bytes that do not parse. */
static int
framed_stream(const uint8_t *p, const uint8_t *end, const uint8_t **name, Py_ssize_t *len)
{
    if (end - p < 5)
        return 0;
    p += 5;
    while (p < end) {
        uint32_t field;
        unsigned wt;
        if (!get_tag(&p, end, &field, &wt))
            return 0;
        if (field == 3 && wt == 2) {
            if (!get_size(&p, end, len))
                return 0;
            *name = p;
            return 1;
        }
        if (!skip_field(&p, end, wt))
            return 0;
    }
    return 0;
}

/* Streams sharing a subject all answer a publish under its id (the twin of
 * publish_codec.answers_another_stream): an answer naming no stream, or a request whose
 * stream cannot be read, counts as the publish's own. */
LBS_INTERNAL int
answers_another_stream(PyObject *stream, PyObject *framed)
{
    if (!PyUnicode_Check(stream) || PyUnicode_GET_LENGTH(stream) == 0 || !PyBytes_Check(framed))
        return 0;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(framed);
    const uint8_t *target;
    Py_ssize_t target_len;
    if (!framed_stream(data, data + PyBytes_GET_SIZE(framed), &target, &target_len))
        return 0;
    Py_ssize_t size;
    const char *name = PyUnicode_AsUTF8AndSize(stream, &size);
    if (name == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear(); /* a lone surrogate: no stream is named so */
        return 1;
    }
    return size != target_len || memcmp(name, target, (size_t)size) != 0;
}

/* answers_another_stream(stream: str, framed: bytes) -> bool, the drop-in for
 * publish_codec.py_answers_another_stream. */
LBS_INTERNAL PyObject *
answers_another_stream_fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "answers_another_stream(stream, framed)");
        return NULL;
    }
    int other = answers_another_stream(args[0], args[1]);
    return other < 0 ? NULL : PyBool_FromLong(other);
}
