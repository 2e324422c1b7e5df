// How tests/data/crypto/ecies_vectors.json was made: Bouncy Castle 1.81.1 (the bcprov the Java
// client 4.0.8 runs with in tests/support/java_peer) encrypts a message for a recipient point,
// once with IESEngine set up as the JCE cipher "ECIES" sets it up but with a fixed ephemeral
// key ("engine"), once with the JCE cipher itself under IESParameterSpec(null, null, 128), as
// MessageCryptoBc wraps data keys ("jce", random ephemeral key).
//
//     javac -cp bcprov-jdk18on-1.81.1.jar EciesVector.java
//     java -cp .:bcprov-jdk18on-1.81.1.jar EciesVector <curve> <point hex> <ephemeral d hex> <message hex>

import java.math.BigInteger;
import java.security.*;
import java.util.HexFormat;
import javax.crypto.Cipher;
import org.bouncycastle.asn1.x9.X9ECParameters;
import org.bouncycastle.crypto.*;
import org.bouncycastle.crypto.agreement.ECDHBasicAgreement;
import org.bouncycastle.crypto.digests.SHA1Digest;
import org.bouncycastle.crypto.engines.IESEngine;
import org.bouncycastle.crypto.generators.EphemeralKeyPairGenerator;
import org.bouncycastle.crypto.generators.KDF2BytesGenerator;
import org.bouncycastle.crypto.macs.HMac;
import org.bouncycastle.crypto.params.*;
import org.bouncycastle.crypto.ec.CustomNamedCurves;
import org.bouncycastle.asn1.x9.ECNamedCurveTable;
import org.bouncycastle.jce.provider.BouncyCastleProvider;
import org.bouncycastle.jce.spec.IESParameterSpec;
import org.bouncycastle.jce.spec.ECPublicKeySpec;
import org.bouncycastle.jce.spec.ECParameterSpec;

// args: curve, recipient point (hex), ephemeral d (hex), message (hex)
public class EciesVector {
    public static void main(String[] a) throws Exception {
        HexFormat hex = HexFormat.of();
        X9ECParameters x9 = ECNamedCurveTable.getByName(a[0]);
        ECDomainParameters dom = new ECDomainParameters(x9.getCurve(), x9.getG(), x9.getN(), x9.getH());
        ECPublicKeyParameters recipient = new ECPublicKeyParameters(x9.getCurve().decodePoint(hex.parseHex(a[1])), dom);
        BigInteger d = new BigInteger(a[2], 16);
        ECPrivateKeyParameters ephPriv = new ECPrivateKeyParameters(d, dom);
        ECPublicKeyParameters ephPub = new ECPublicKeyParameters(dom.getG().multiply(d).normalize(), dom);
        AsymmetricCipherKeyPairGenerator fixed = new AsymmetricCipherKeyPairGenerator() {
            public void init(KeyGenerationParameters p) {}
            public AsymmetricCipherKeyPair generateKeyPair() { return new AsymmetricCipherKeyPair(ephPub, ephPriv); }
        };
        IESEngine engine = new IESEngine(new ECDHBasicAgreement(), new KDF2BytesGenerator(new SHA1Digest()), new HMac(new SHA1Digest()));
        engine.init(recipient, new IESParameters(null, null, 128),
                new EphemeralKeyPairGenerator(fixed, k -> ((ECPublicKeyParameters) k).getQ().getEncoded(false)));
        byte[] m = hex.parseHex(a[3]);
        System.out.println("engine " + hex.formatHex(engine.processBlock(m, 0, m.length)));
        // the JCE cipher the Java client uses, random ephemeral key
        Security.addProvider(new BouncyCastleProvider());
        ECParameterSpec spec = new ECParameterSpec(x9.getCurve(), x9.getG(), x9.getN(), x9.getH());
        PublicKey pub = KeyFactory.getInstance("ECDSA", "BC").generatePublic(new ECPublicKeySpec(recipient.getQ(), spec));
        Cipher c = Cipher.getInstance("ECIES", "BC");
        c.init(Cipher.ENCRYPT_MODE, pub, new IESParameterSpec(null, null, 128));
        System.out.println("jce " + hex.formatHex(c.doFinal(m)));
    }
}
