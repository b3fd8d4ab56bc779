/* tests/unit/text_test.c: common/sk_text (UTF-8 checks, terminal escaping)
 * and the JSON strings of common/sk_buf on hostile bytes. */
#include "tests/t.h"

#include "common/sk_buf.h"
#include "common/sk_text.h"

static const char *esc(const char *s)
{
	static char out[256];
	return sk_text_escape(s, out, sizeof out);
}

static const char *json(const char *s)
{
	static char out[256];
	sk_buf b;
	sk_buf_init(&b);
	sk_buf_json_str(&b, s);
	snprintf(out, sizeof out, "%s", sk_buf_str(&b));
	sk_buf_free(&b);
	return out;
}

T_TEST(text_utf8_decoder_strict)
{
	uint32_t cp;
	T_EQ(sk_utf8_next((const unsigned char *)"A", 1, &cp), 1);
	T_EQ(cp, 'A');
	T_EQ(sk_utf8_next((const unsigned char *)"\xc3\xa9", 2, &cp), 2);
	T_EQ(cp, 0xe9);
	T_EQ(sk_utf8_next((const unsigned char *)"\xe2\x82\xac", 3, &cp), 3);
	T_EQ(cp, 0x20ac);
	T_EQ(sk_utf8_next((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
	T_EQ(cp, 0x1f600);
	T_EQ(sk_utf8_next((const unsigned char *)"\xc0\xaf", 2, &cp), 0);         /* overlong '/' */
	T_EQ(sk_utf8_next((const unsigned char *)"\xe0\x80\xaf", 3, &cp), 0);     /* overlong */
	T_EQ(sk_utf8_next((const unsigned char *)"\xed\xa0\x80", 3, &cp), 0);     /* surrogate */
	T_EQ(sk_utf8_next((const unsigned char *)"\xf4\x90\x80\x80", 4, &cp), 0); /* > U+10FFFF */
	T_EQ(sk_utf8_next((const unsigned char *)"\x80", 1, &cp), 0);             /* lone continuation */
	T_EQ(sk_utf8_next((const unsigned char *)"\xe2\x82", 2, &cp), 0);         /* cut short */
}

T_TEST(text_check_tags)
{
	char why[128];
	T_EQ(sk_text_check("rack-7", 64, why, sizeof why), 0);
	T_EQ(sk_text_check("zone é €", 64, why, sizeof why), 0);
	T_EQ(sk_text_check("", 64, why, sizeof why), 0);
	T_EQ(sk_text_check("a\x1b[2Jb", 64, why, sizeof why), -1);
	T_CHECK(strstr(why, "byte 2") && strstr(why, "control"));
	T_EQ(sk_text_check("line\nbreak", 64, why, sizeof why), -1);
	T_EQ(sk_text_check("del\x7f", 64, why, sizeof why), -1);
	T_EQ(sk_text_check("c1 \xc2\x9b", 64, why, sizeof why), -1); /* U+009B, CSI */
	T_EQ(sk_text_check("bad \xff", 64, why, sizeof why), -1);
	T_CHECK(strstr(why, "UTF-8"));
	T_EQ(sk_text_check("0123456789", 9, why, sizeof why), -1);
	T_CHECK(strstr(why, "longer"));
}

T_TEST(text_escape_for_terminal)
{
	T_STREQ(esc("plain é"), "plain é");
	T_STREQ(esc("a\x1b[31mred"), "a\\x1b[31mred");
	T_STREQ(esc("two\nlines\r"), "two\\x0alines\\x0d");
	T_STREQ(esc("bad\xff\xc3"), "bad\\xff\\xc3");
	T_STREQ(esc("c1\xc2\x9b"), "c1\\xc2\\x9b");
	char small[8];
	sk_text_escape("ab\x1b\x1b", small, sizeof small); /* "ab\x1b" fits, the next escape does not */
	T_STREQ(small, "ab\\x1b");
	sk_text_escape("abcdé", small, 6); /* never half a character */
	T_STREQ(small, "abcd");
}

T_TEST(text_json_always_valid)
{
	T_STREQ(json("q\"b\\"), "\"q\\\"b\\\\\"");
	T_STREQ(json("esc\x1b nl\n"), "\"esc\\u001b nl\\u000a\"");
	T_STREQ(json("é"), "\"é\"");
	T_STREQ(json("x\xff\xfey"), "\"x\\ufffd\\ufffdy\"");
	T_STREQ(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
	T_STREQ(json("c1\xc2\x85"), "\"c1\\u0085\"");
}
