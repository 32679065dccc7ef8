/* A replica's check of the CommitLog bytes its HA link brings, in C: the walk of
 * ``broker_store.store.record_check.check_arrival`` (its docstring states the rules).
 *
 * ``walk_arrival(data, start, segment_size)`` -> (offset, intact). ``intact`` True: every whole record of
 * ``data`` (CommitLog bytes from ``start``) checks out and ``offset`` is the boundary after the last one (the
 * last record may be cut short). ``intact`` False: the record at ``offset`` is damaged; the Python walk then
 * starts there to say what is wrong with it, so this file decides which record is damaged and nothing else,
 * and tests/unit/test_record_walk.py holds the two walks equal over generated and damaged logs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <zlib.h>

/* The stored-record layout is owned by broker_store/protocol/message.py (STORED_FIELDS): these are its
 * STORED_OFFSETS, STORED_HEADER_SIZE, MAGIC_V1 and BLANK_MAGIC; MIN_RECORD_SIZE and BLANK_HEAD are
 * record_check's. tests/unit/test_record_walk.py compares every #define below with the Python owner, so a
 * layout change there fails the test until this file follows. */
#define HEADER_SIZE 88
#define MAGIC_V1 (-626843481)
#define BLANK_MAGIC (-875286124)
#define MIN_RECORD_SIZE 91
#define BLANK_HEAD 8
#define OFF_TOTALSIZE 0
#define OFF_MAGICCODE 4
#define OFF_BODYCRC 8
#define OFF_PHYSICALOFFSET 28
#define OFF_BODYLEN 84

static int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint64_t)(uint32_t)be32(p + 4));
}

/* Whether the whole V1 record of ``total`` bytes at ``r`` (CommitLog offset ``pos``) is intact. */
static int record_intact(const unsigned char *r, int64_t total, int64_t pos) {
    int64_t body_len = be32(r + OFF_BODYLEN);
    int64_t t = HEADER_SIZE + body_len;
    if (body_len < 0 || t + 3 > total || be64(r + OFF_PHYSICALOFFSET) != pos) return 0;
    int64_t p = t + 1 + r[t];
    if (p + 2 > total || p + 2 + (((int64_t)r[p] << 8) | r[p + 1]) != total) return 0;
    uLong crc = crc32(0L, r + HEADER_SIZE, (uInt)body_len) & 0x7FFFFFFF;
    return (int64_t)crc == (int64_t)be32(r + OFF_BODYCRC);
}

static PyObject *walk_arrival(PyObject *self, PyObject *args) {
    Py_buffer buf;
    long long start, segment_size;
    if (!PyArg_ParseTuple(args, "y*LL", &buf, &start, &segment_size)) return NULL;
    if (segment_size <= 0 || start < 0) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "walk_arrival: start must be >= 0 and segment_size > 0");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)buf.buf;
    int64_t pos = start, end = start + (int64_t)buf.len;
    int intact = 1;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        int64_t room = segment_size - pos % segment_size;
        if (room < BLANK_HEAD) { /* the segment's padding */
            if (end < pos + room) break;
            pos += room;
            continue;
        }
        if (end - pos < BLANK_HEAD) break;
        const unsigned char *r = data + (pos - start);
        int64_t total = be32(r + OFF_TOTALSIZE);
        int32_t magic = be32(r + OFF_MAGICCODE);
        if (magic == BLANK_MAGIC) {
            if (total != room) { intact = 0; break; }
            if (end < pos + room) break;
            pos += room;
            continue;
        }
        if (magic == MAGIC_V1 && MIN_RECORD_SIZE <= total && total <= room) {
            if (end < pos + total) break; /* cut short: checked when the rest arrives */
            if (record_intact(r, total, pos)) {
                pos += total;
                continue;
            }
        }
        intact = 0;
        break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return Py_BuildValue("(LO)", (long long)pos, intact ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"walk_arrival", walk_arrival, METH_VARARGS,
     "walk_arrival(data, start, segment_size) -> (offset, intact): record_check.check_arrival's walk."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_record_walk", .m_doc = NULL, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
